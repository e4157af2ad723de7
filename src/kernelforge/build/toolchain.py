"""Compilers and SDKs a build needs: finding them, their versions, and kernel dependencies.

Everything here runs without importing torch. A lookup's answer is cached for the
process, per the values of the environment variables it reads (``CXX`` and ``PATH`` for
:func:`find_cxx`), because probing a compiler means starting it: a process that sets one
between two builds (a notebook, a service) gets the compiler it names now, while a
compiler is asked its version once for each set of values that chooses it, and again
only where the file it is was replaced meanwhile (a compiler upgraded in place, a toolkit
link moved to another release: :func:`_file_stamp`). A value
relative to the current directory (``CXX=./mycc``, a ``PATH`` entry ``bin``) is read from
the directory the lookup runs in, and that directory is part of what the answer is cached
for. A compiler that did not answer is remembered for the run under way only
(:func:`build_run`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.util
import os
import re
import shlex
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ParamSpec, Protocol, TypeVar, cast

from kernelforge.errors import ToolchainError


@dataclass(frozen=True)
class Tool:
    """A compiler found on this machine."""

    name: str
    path: Path
    version: tuple[int, ...]
    description: str
    #: why the toolkit an environment variable names was passed over for this one ("")
    note: str = field(default="", compare=False)
    #: what chose a GPU compiler: the variable naming its toolkit (``CUDA_HOME``),
    #: ``PATH``, or the folder it was found in; ``None`` where not known
    chooser: str | None = field(default=None, compare=False)

    @property
    def version_str(self) -> str:
        return ".".join(str(p) for p in self.version)

    @property
    def found(self) -> str:
        """How the lookup came to it, for messages (``found on PATH``, ``named by
        CUDA_HOME``, ``found in /usr/local/cuda-12.8``); "" where not known."""
        return "" if self.chooser is None else _found_where(self.chooser)

    def identity(self) -> str:
        """A string that changes whenever the installed tool changes (for cache keys): the
        file found and what the tool says it is, which names the real compiler behind a
        wrapper (ccache's links, a script that execs another compiler)."""
        said = f"{self.name} {self.version_str} {self.description}"
        try:
            st = self.path.stat()
            return f"{self.path}:{st.st_size}:{st.st_mtime_ns}:{said}"
        except OSError:
            return f"{self.path}:{said}"


#: How long a compiler may take to say its version (``--version``, gcc's
#: ``-dumpfullversion``), in seconds. One that takes longer hangs (a wrapper script that
#: waits, a licensed compiler waiting for its license server): the build stops, naming
#: it, rather than wait for ever.
VERSION_TIMEOUT_S: float = 60


class _NoAnswer(ToolchainError):
    """A command that did not end within :data:`VERSION_TIMEOUT_S`."""


class _NoVersion(ToolchainError):
    """A GPU compiler whose ``--version`` holds no version it can be told by."""


#: The commands that did not answer in the run under way (:func:`build_run`), by
#: :func:`_question`, with what to say when one is asked again; None outside a run.
_UNANSWERED: contextvars.ContextVar[dict[tuple[str, ...], str] | None] = \
    contextvars.ContextVar("kernelforge_unanswered", default=None)


@contextlib.contextmanager
def build_run() -> Iterator[None]:
    """Make the builds inside it one run, as ``kernelforge build --python A --python B``
    is: a compiler, or the ninja the compile would run (:func:`ask_tool`), that did not
    answer within :data:`VERSION_TIMEOUT_S` is not asked again in it, so each further
    environment fails at once with the error naming it instead of waiting as long again.
    Answers are cached per process anyway (per the values of the variables that choose
    the compiler, and the compiler's file); a hang is remembered for the run only, since
    the compiler may be fixed before the next one.
    Inside a run already, the outer run's memory is kept.

    The run belongs to the context it was entered in (a :mod:`contextvars` variable), so
    that two threads building apart have runs of their own. A thread started inside it
    starts with an empty context and is outside it: a build handed to a worker thread
    (``ThreadPoolExecutor.submit``) joins the run only when it runs in a copy of the
    context taken inside it, ``contextvars.copy_context().run``, one copy per call. All
    the copies share the run's memory.

    Example:
        >>> from kernelforge.build import build_project, build_run
        >>> with build_run():  # doctest: +SKIP
        ...     for python in ["/envs/a/bin/python", "/envs/b/bin/python"]:
        ...         build_project("my-relu", python=python)
        >>> with build_run(), ThreadPoolExecutor() as pool:  # doctest: +SKIP
        ...     done = [pool.submit(contextvars.copy_context().run, build_project,
        ...                         "my-relu", python=python) for python in pythons]
    """
    if _UNANSWERED.get() is not None:
        yield
        return
    token = _UNANSWERED.set({})
    try:
        yield
    finally:
        _UNANSWERED.reset(token)


def _question(cmd: Sequence[str]) -> tuple[str, ...]:
    """What identifies ``cmd`` as a question to one program: the file it runs (links
    resolved), the name it runs it by (ccache's links and clang's driver are other
    compilers by other names) and the arguments."""
    program = Path(cmd[0])
    return (str(program.resolve()), program.name, *cmd[1:])


def _run_version(cmd: Sequence[str]) -> str:
    return _ask(cmd)[1]


def ask_tool(cmd: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """The exit status of ``cmd``, a question to a tool of the build other than the
    compilers (``ninja --version``), and what it wrote, asked as the compilers are
    (:func:`_ask`, with the environment ``env``; default: this process's): within a
    :func:`build_run`, a tool that did not answer in time is not waited for again.

    Raises:
        ToolchainError: it could not be started, or did not end within
            :data:`VERSION_TIMEOUT_S`, now or earlier in the run (the message says which).
    """
    return _ask(cmd, env)


def _ask(cmd: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """The exit status of ``cmd`` and what it wrote (stdout, then stderr), run with the
    environment ``env`` (default: this process's).

    ``cmd`` runs in a process group of its own, which is killed whole when it does not
    end in time (or the wait is interrupted): a wrapper script's compiler, its child,
    would otherwise outlive it.

    Within a :func:`build_run`, a command that did not end in time is not started again.

    Raises:
        _NoAnswer: it did not end within :data:`VERSION_TIMEOUT_S`, now or earlier in
            the run.
        ToolchainError: it could not be started.
    """
    shown = " ".join(cmd)
    unanswered = _UNANSWERED.get()
    question = _question(cmd)
    if unanswered is not None and question in unanswered:
        raise _NoAnswer(unanswered[question])
    try:
        # a compiler may answer in its locale's encoding (a translated copyright line)
        proc = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace",
                                start_new_session=True,
                                env=None if env is None else dict(env))
    except OSError as err:
        raise ToolchainError(f"could not run '{shown}': {err}") from err
    with proc:
        try:
            stdout, stderr = proc.communicate(timeout=VERSION_TIMEOUT_S)
        except BaseException as stopped:
            _kill_group(proc)
            if isinstance(stopped, subprocess.TimeoutExpired):
                if unanswered is not None:
                    unanswered[question] = (
                        f"'{shown}' was already found not to answer within "
                        f"{VERSION_TIMEOUT_S:g} s earlier in this run (not asked again)")
                raise _NoAnswer(f"'{shown}' did not end within {VERSION_TIMEOUT_S:g} s") \
                    from None
            raise
    return proc.returncode, stdout + stderr


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """Kill ``proc`` and the processes it started (its process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (OSError, AttributeError):  # gone already; no process groups (Windows)
        proc.kill()


def _parse_version(text: str, pattern: str) -> tuple[int, ...] | None:
    """The dotted version in the first group of ``pattern`` that matched."""
    m = re.search(pattern, text)
    if not m:
        return None
    found = next(g for g in m.groups() if g is not None)
    return tuple(int(p) for p in found.split("."))


# --- values relative to the current directory --------------------------------------------

#: The environment variables that choose the compilers and toolkits a build runs, by
#: what their values name: a program (``CC`` and ``NVCC_CCBIN``: or the folder holding
#: one), a command of several words (torch writes ``PYTORCH_NVCC`` into its ninja files
#: as it is, for a shell to run: ``ccache ./nvcc``; :func:`_command_paths`), a folder
#: (``GCC_EXEC_PREFIX``: the start of file names), or a list of folders. A relative
#: value (of a command: a word of it) is read from the current directory when the
#: compiler is looked up, as make and CMake read one; the compilers run in the build's
#: work directory, where it would name another file or none
#: (:func:`absolute_environment`).
_PROGRAM_VARIABLES = ("CC", "CXX", "AR", "NVCC_CCBIN", "CUDAHOSTCXX")
_COMMAND_VARIABLES = ("PYTORCH_NVCC",)
_FOLDER_VARIABLES = ("CUDA_HOME", "CUDA_PATH", "ROCM_HOME", "ROCM_PATH", "GCC_EXEC_PREFIX")
_SEARCH_PATH_VARIABLES = ("PATH", "COMPILER_PATH")
TOOL_LOCATION_VARIABLES = (*_PROGRAM_VARIABLES, *_COMMAND_VARIABLES, *_FOLDER_VARIABLES,
                           *_SEARCH_PATH_VARIABLES)

#: Variables whose value may name a folder by a bare name (nvcc's ``-ccbin``).
_PROGRAM_OR_FOLDER = ("CC", "NVCC_CCBIN")


#: A word of a shell command, quoted parts and all (``-Xcompiler '-O2 -g'`` is two).
_SHELL_WORD = re.compile(r"""(?:[^\s'"\\]|\\.|'[^']*'|"(?:[^"\\]|\\.)*")+""")

#: A word a shell reads as it is written (no quotes, variables, ``~`` or globs).
_PLAIN_WORD = re.compile(r"[\w@%+=:,./-]+")

#: A shell's variable assignment before a command (``CCACHE_DIR=./cache ccache nvcc``).
_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=")


def _command_paths(value: str) -> list[re.Match[str]]:
    """The words of the command ``value`` that name a file by a path relative to the
    current directory, each as :func:`_reads_here` judges a program (``./nvcc``,
    ``bin/ccache``: not ``nvcc``, which is looked up on ``PATH``). Options (``-ccbin``,
    ``--x=./y``), assignments (``CCACHE_DIR=./cache``) and words the shell would change
    (quoted, ``~``, ``$``) are the command's own and are not taken for paths."""
    return [word for word in _SHELL_WORD.finditer(value)
            if _PLAIN_WORD.fullmatch(word[0]) and not word[0].startswith("-")
            and not _ASSIGNMENT.match(word[0]) and _reads_here("CXX", word[0])]


def _reads_here(var: str, value: str | None) -> bool:
    """Whether ``value`` of the variable ``var`` names something by a path relative to
    the current directory. A program's bare name (``g++``) is a command looked up on
    ``PATH``, as a shell runs it, unless it names a folder here where a folder is meant;
    an empty entry of a list of folders is the current directory, as for a shell."""
    if not value:
        return False
    if var in _SEARCH_PATH_VARIABLES:
        return any(not os.path.isabs(entry) for entry in value.split(os.pathsep))
    if var in _FOLDER_VARIABLES:
        return not os.path.isabs(value)
    if var in _COMMAND_VARIABLES:
        return bool(_command_paths(value))
    if os.path.isabs(value):
        return False
    has_folder = os.sep in value or bool(os.altsep and os.altsep in value)
    return has_folder or (var in _PROGRAM_OR_FOLDER and os.path.isdir(value))


def _absolute(value: str, here: str) -> str:
    """The path ``value`` read from the folder ``here``: its ``.`` parts dropped, but
    not ``..`` (the folder above a link is not the link's parent), and a trailing
    separator kept (``GCC_EXEC_PREFIX`` is the start of file names)."""
    if os.path.isabs(value):
        return value
    joined = str(Path(here, value))
    return joined + os.sep if value.endswith(os.sep) and not joined.endswith(os.sep) \
        else joined


def _read_from(path: str, here: str | None) -> str:
    """``path`` read from the folder ``here`` (``None``: as it is)."""
    return path if here is None else _absolute(path, here)


def _absolute_value(var: str, value: str, here: str) -> str:
    """``value`` of the variable ``var`` (one of :data:`TOOL_LOCATION_VARIABLES`) with
    what it names relative to the current directory, ``here``, made absolute; a value
    that names nothing by a relative path is returned as it is."""
    if not _reads_here(var, value):
        return value
    if var in _SEARCH_PATH_VARIABLES:
        return os.pathsep.join(_absolute(entry, here) for entry in value.split(os.pathsep))
    if var in _COMMAND_VARIABLES:
        # a shell splits the command: a folder here with a blank in it is quoted
        return _replace_words(value, _command_paths(value),
                              lambda word: shlex.quote(_absolute(word, here)))
    return _absolute(value, here)


def _replace_words(value: str, words: Sequence[re.Match[str]],
                   replace: Callable[[str], str]) -> str:
    """``value`` with each of ``words`` (matches in it, in order) replaced by what
    ``replace`` makes of it, the rest (the blanks between words) kept as it is."""
    parts, end = [], 0
    for word in words:
        parts += [value[end:word.start()], replace(word[0])]
        end = word.end()
    return "".join(parts) + value[end:]


def _here(environ: Mapping[str, str], variables: Sequence[str]) -> str | None:
    """The current directory where ``environ`` gives one of ``variables`` a value
    relative to it (a lookup's answer is then cached for the directory too); ``None``
    where none of them depends on it.

    Raises:
        ToolchainError: the current directory cannot be read (it was removed).
    """
    var = next((v for v in variables if _reads_here(v, environ.get(v))), None)
    if var is None:
        return None
    try:
        return os.getcwd()
    except OSError as err:
        raise ToolchainError(
            f"{var}={environ[var]!r} is relative to the current directory, which cannot be "
            f"read ({err.strerror or err}); fix: run the build from a folder that exists, "
            f"or give {var} as an absolute path") from None


def absolute_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of :data:`TOOL_LOCATION_VARIABLES` that ``environ`` gives a value
    relative to the current directory, with that value made absolute: what the
    compilers, which run in the build's work directory, are given, so that
    ``CXX=./mycc`` runs the file that the lookups found and asked its version.

    Raises:
        ToolchainError: the current directory cannot be read (it was removed).
    """
    here = _here(environ, TOOL_LOCATION_VARIABLES)
    if here is None:
        return {}
    return {var: _absolute_value(var, environ[var], here)
            for var in TOOL_LOCATION_VARIABLES if _reads_here(var, environ.get(var))}


#: What tells one file from another that replaced it at the same path (:func:`_file_stamp`).
_Stamp = tuple[int, int, int, int, int]


def _file_stamp(path: Path) -> _Stamp | None:
    """The identity of the file ``path`` leads to, links followed (device, inode, size,
    modification and change times), in one ``stat``; ``None`` where there is none.

    A compiler's answers are cached per this too: a compiler upgraded in place keeps its
    path and the variables that chose it, but the package manager writes a new file
    (another inode) or rewrites it (new times), and a link moved to another release
    (``/usr/local/cuda``, ``/etc/alternatives/c++``) leads to another file. Without it,
    the rest of the process would record the old compiler's version in what it builds.
    """
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _first_existing(candidates: Sequence[tuple[str, Path | None]],
                    marker: str | None = None) -> tuple[str, Path] | None:
    """The first executable candidate, as found (links kept: the file one leads to is
    the lookup's to read, :func:`_file_stamp`), with what chose it. Each candidate is
    ``(chooser, path)``, the chooser being the variable naming it, ``PATH``, or "" for the
    default location. With ``marker``, only one whose toolkit home (the grandparent of the
    resolved file) holds that file, which skips wrapper scripts such as a
    /usr/local/bin/nvcc that execs the real one."""
    for chooser, cand in candidates:
        if cand is None or not cand.is_file() or not os.access(cand, os.X_OK):
            continue
        if marker is None or (cand.resolve().parent.parent / marker).is_file():
            return chooser, cand
    return None


#: Where each GPU compiler is looked for: the environment variables naming its toolkit,
#: the default installation, its version in ``--version``, and a file its toolkit has.
#: The version is the full one the tool gives (nvcc's ``V13.0.88`` after ``release
#: 13.0``, hipcc's ``6.2.41133``), which metadata.json records: two updates of one
#: release may compile to other bytes.
_DEVICE_COMPILERS: dict[str, tuple[tuple[str, ...], str, str, str]] = {
    "nvcc": (("CUDA_HOME", "CUDA_PATH"), "/usr/local/cuda",
             r"release \d+\.\d+, V(\d+\.\d+(?:\.\d+)*)|release (\d+\.\d+)",
             "include/cuda_runtime.h"),
    "hipcc": (("ROCM_HOME", "ROCM_PATH"), "/opt/rocm", r"HIP version: (\d+\.\d+(?:\.\d+)*)",
              "include/hip/hip_runtime.h"),
}


#: What each GPU compiler's installation is called in messages.
_TOOLKITS: dict[str, str] = {"nvcc": "CUDA toolkit", "hipcc": "ROCm installation"}


def _find_device_compiler(name: str, homes: tuple[str | None, ...],
                          search_path: str | None, here: str | None) -> Tool | None:
    """A GPU compiler: ``<home>/bin/<name>`` for each home its environment variables name
    (``homes``: their values, in :data:`_DEVICE_COMPILERS`' order), then the
    ``search_path`` (``$PATH``), then the default installation; its version read from
    ``<name> --version``. A toolkit a variable names but that is passed over is explained
    in ``Tool.note``. Relative values are read from ``here``, the current directory when
    one of them is relative (else ``None``). Where it is is cached per those values, which
    :func:`_device_lookup` reads; what it says, per those and the file it is.

    Raises:
        ToolchainError: ``<name> --version`` did not end within
            :data:`VERSION_TIMEOUT_S` (:func:`_device_hung` says what to do), or its
            answer holds no version.
    """
    found = _locate_device_compiler(name, homes, search_path, here)
    if found is None:
        return None
    chooser, path = found
    return _asked_device_compiler(name, homes, here, chooser, path, _file_stamp(path))


def _named_homes(name: str, homes: tuple[str | None, ...]) -> dict[str, str]:
    """The toolkit variables of ``name`` that are set, with their values (``homes``)."""
    env_vars = _DEVICE_COMPILERS[name][0]
    return {var: home for var, home in zip(env_vars, homes, strict=True) if home}


@functools.lru_cache(maxsize=None)
def _locate_device_compiler(name: str, homes: tuple[str | None, ...],
                            search_path: str | None,
                            here: str | None) -> tuple[str, Path] | None:
    """Where :func:`_find_device_compiler` finds ``name``, with what chose it (as for
    :func:`_first_existing`); cached per the values of the variables."""
    marker = _DEVICE_COMPILERS[name][3]
    candidates = _candidates(name, homes, search_path, here)
    # a real toolkit first; a lone wrapper script only when nothing else exists
    return _first_existing(candidates, marker) or _first_existing(candidates)


def _candidates(name: str, homes: tuple[str | None, ...], search_path: str | None,
                here: str | None) -> list[tuple[str, Path | None]]:
    """Where ``name`` may be, in the order it is looked for (as for
    :func:`_first_existing`): in the toolkits its variables name, on the search path,
    in the default installation."""
    default_home = _DEVICE_COMPILERS[name][1]
    if here is not None and search_path:
        search_path = _absolute_value("PATH", search_path, here)
    candidates: list[tuple[str, Path | None]] = [
        (var, Path(_read_from(home, here)) / "bin" / name)
        for var, home in _named_homes(name, homes).items()
    ]
    which = shutil.which(name, path=search_path)
    candidates.append(("PATH", Path(which) if which else None))
    candidates.append(("", Path(default_home) / "bin" / name))
    return candidates


def _found_where(chooser: str) -> str:
    """How a GPU compiler was found, in words, from what chose it: a variable naming
    its toolkit, ``PATH``, or the folder it is in."""
    if chooser == "PATH":
        return "found on PATH"
    if chooser in TOOL_LOCATION_VARIABLES:
        return f"named by {chooser}"
    return f"found in {chooser}"


@functools.lru_cache(maxsize=None)
def _asked_device_compiler(name: str, homes: tuple[str | None, ...], here: str | None,
                           chooser: str, found: Path, stamp: _Stamp | None) -> Tool:
    """The GPU compiler ``found`` (chosen by ``chooser``) and its version, cached per the
    values of the variables and the identity of the file it leads to (``stamp``). The
    path is resolved here, not where it was found: a toolkit link moved to another release
    leads to another compiler."""
    _, _, version_pattern, marker = _DEVICE_COMPILERS[name]
    named = _named_homes(name, homes)
    path = found.resolve()
    try:
        text = _run_version([str(path), "--version"])
    except _NoAnswer as err:
        raise _device_hung(name, path, chooser, err, named) from None
    version = _parse_version(text, version_pattern)
    if version is None:
        raise _NoVersion(f"cannot read the version from '{path} --version':\n{text}")
    note = ""
    passed_over = _home_problem(name, named, here)
    if passed_over is not None and \
            (Path(_read_from(named[passed_over[0]], here)) / "bin" / name).resolve() != path:
        var, problem = passed_over
        note = (f"{problem}, so {path} is used; fix: point {var} at the toolkit's folder "
                f"(the one holding bin/{name} and {marker}), or unset it")
    return Tool(name, path, version, text.strip().splitlines()[-1], note,
                chooser or _DEVICE_COMPILERS[name][1])


def _device_hung(name: str, path: Path, chooser: str, err: _NoAnswer,
                 named: Mapping[str, str]) -> ToolchainError:
    """The error for a GPU compiler that did not answer ``--version`` in time: which one,
    what chose it (``chooser``: the variable naming its toolkit, ``PATH``, or "" for the
    default location; ``named``: the toolkit variables set, with their values), and the
    ways out. A toolkit variable is looked at before ``PATH`` and the default, so
    pointing one at another toolkit gets past a hung compiler wherever it was found."""
    env_vars, default_home, _, marker = _DEVICE_COMPILERS[name]
    if chooser in env_vars:
        where, var = f"named by {chooser}={named.get(chooser, '')}", chooser
    else:
        where, var = _found_where(chooser or default_home), env_vars[0]
    toolkit = _TOOLKITS[name]
    return ToolchainError(
        f"{name} {path} ({where}) hung: {err}, so the build stopped before "
        f"compiling; fix: run '{path} --version' to see it wait (a wrapper script waiting "
        f"for input, or a broken {toolkit}: reinstall it) and fix that, or point {var} at "
        f"another {toolkit} (the folder holding bin/{name} and {marker})")


def _home_problem(name: str, environ: Mapping[str, str],
                  here: str | None) -> tuple[str, str] | None:
    """The first environment variable naming ``name``'s toolkit that is set in
    ``environ``, and why that toolkit is not a usable one (no ``bin/<name>``, or no
    toolkit around it); None when it is usable or no variable is set. A relative value
    is read from ``here`` (the current directory), and named with the folder it is."""
    env_vars, _, _, marker = _DEVICE_COMPILERS[name]
    var = next((v for v in env_vars if environ.get(v)), None)
    if var is None:
        return None
    value = environ[var]
    home = _read_from(value, here)
    shown = f"{var}={value}" if home == value else f"{var}={value} ({home})"
    exe = Path(home) / "bin" / name
    if not exe.is_file() or not os.access(exe, os.X_OK):
        return var, f"{shown} has no bin/{name}"
    if not (exe.resolve().parent.parent / marker).is_file():
        return var, f"{shown} holds bin/{name} but no {marker}"
    return None


def not_found_reason(name: str) -> str:
    """Why ``find_nvcc()``/``find_hipcc()`` found nothing, with the fix."""
    env_vars, default_home, _, _ = _DEVICE_COMPILERS[name]
    passed_over = _home_problem(name, os.environ, _here(os.environ, env_vars))
    if passed_over is None:
        return f"{name} was not found (set {env_vars[0]} or put {name} on PATH)"
    var, problem = passed_over
    return (f"{name} was not found: {problem}, and none is on PATH or in {default_home}; "
            f"fix: point {var} at the toolkit's folder (the one holding bin/{name})")


_T = TypeVar("_T")
_T_co = TypeVar("_T_co", covariant=True)
_P = ParamSpec("_P")


class _Lookup(Protocol[_P, _T_co]):
    """A compiler lookup: called, it reads the environment variables that choose the
    compiler (:func:`find_nvcc` also takes the CUDA version to match);
    ``cache_clear()`` forgets every answer cached for them."""

    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> _T_co: ...

    def cache_clear(self) -> None: ...


def _clears(*cache_clears: Callable[[], None]
            ) -> Callable[[Callable[_P, _T]], _Lookup[_P, _T]]:
    """Give a lookup a ``cache_clear()`` that clears the caches behind it (where it
    found the compiler, and what the compiler said), as it had when it was cached
    itself: callers clear it when a compiler changed behind a file that did not (a
    wrapper script running another compiler), which neither a variable nor the file
    tells."""
    def clear() -> None:
        for cache_clear in cache_clears:
            cache_clear()

    def give(find: Callable[_P, _T]) -> _Lookup[_P, _T]:
        find.cache_clear = clear  # type: ignore[attr-defined]
        return cast("_Lookup[_P, _T]", find)
    return give


def _device_lookup(name: str, wanted: tuple[int, int] | None = None) -> Tool | None:
    """:func:`_find_device_compiler` for the values the variables it reads have now;
    with ``wanted``, a CUDA version, the toolkit closest to it where no variable names a
    usable one and the compiler found is of another version (:func:`_closest_nvcc`)."""
    env_vars = _DEVICE_COMPILERS[name][0]
    homes = tuple(os.environ.get(v) for v in env_vars)
    search_path = os.environ.get("PATH")
    here = _here(os.environ, (*env_vars, "PATH"))
    first = _find_device_compiler(name, homes, search_path, here)
    if wanted is None or (first is not None and _in_toolkit(first)
                          and (first.chooser in env_vars or first.version[:2] == wanted)):
        return first  # a toolkit a variable names is used whatever its version
    return _closest_nvcc(first, homes, search_path, here, wanted)


def _in_toolkit(tool: Tool) -> bool:
    """Whether the GPU compiler ``tool`` is part of a toolkit (the file its
    :data:`_DEVICE_COMPILERS` entry names is beside it), not a lone wrapper script that
    the lookup takes only where it finds nothing else: a build takes the folder above
    its ``bin`` for the toolkit's headers and libraries."""
    return (tool.path.parent.parent / _DEVICE_COMPILERS[tool.name][3]).is_file()


#: The folders that hold CUDA toolkits side by side, one per release, as NVIDIA's
#: installers and packages put them (``/usr/local/cuda-12.8``, ``/usr/local/cuda-13.0``):
#: each ``cuda-<version>`` folder in them with ``bin/nvcc`` is a toolkit
#: :func:`find_nvcc` may choose for a torch's CUDA version.
CUDA_TOOLKIT_FOLDERS: tuple[str, ...] = ("/usr/local",)


def _versioned_cuda_homes() -> list[Path]:
    """The ``cuda-<version>`` folders of :data:`CUDA_TOOLKIT_FOLDERS`, the newest
    version first. Read on every lookup (a few entries): a toolkit installed while a
    process runs is found by its next build."""
    found: list[tuple[tuple[int, ...], Path]] = []
    for parent in CUDA_TOOLKIT_FOLDERS:
        try:
            names = os.listdir(parent)
        except OSError:  # not there, not readable: no toolkits in it
            continue
        for entry in names:
            m = re.fullmatch(r"cuda-(\d+(?:\.\d+)*)", entry)
            if m:
                found.append((tuple(int(p) for p in m[1].split(".")), Path(parent, entry)))
    return [home for _, home in sorted(found, key=lambda f: f[0], reverse=True)]


def _closeness(nvcc: Tool, wanted: tuple[int, int]) -> tuple[int, int] | None:
    """How well ``nvcc`` fits a torch built with CUDA ``wanted``, lower being better:
    the same major.minor, then an older minor of the same major (what it compiles runs
    on torch's newer runtime, by CUDA's minor version compatibility), the closest first,
    then a newer minor; ``None`` for another major version."""
    major, minor = nvcc.version[0], (nvcc.version[1:2] or (0,))[0]
    if major != wanted[0]:
        return None
    if minor <= wanted[1]:
        return (0 if minor == wanted[1] else 1, wanted[1] - minor)
    return (2, minor - wanted[1])


def _closest_nvcc(first: Tool | None, homes: tuple[str | None, ...],
                  search_path: str | None, here: str | None,
                  wanted: tuple[int, int]) -> Tool | None:
    """The nvcc closest to CUDA ``wanted`` (:func:`_closeness`) among ``first`` (the
    one the plain lookup found), the toolkit on ``PATH``, /usr/local/cuda and the
    ``cuda-<version>`` folders of :data:`CUDA_TOOLKIT_FOLDERS`, the earliest of these
    on a tie; ``first`` when none is of the same major version. A ``first`` that is a
    lone wrapper script (:func:`_in_toolkit`) gives way to any toolkit of that major
    version. A toolkit whose nvcc gives no version is passed over; one that does not
    answer stops the lookup, as it would the plain one."""
    marker = _DEVICE_COMPILERS["nvcc"][3]
    others = [*_candidates("nvcc", (None,) * len(homes), search_path, here),
              *((str(home), home / "bin" / "nvcc") for home in _versioned_cuda_homes())]
    best, fit = first, (None if first is None or not _in_toolkit(first)
                        else _closeness(first, wanted))
    seen = set() if first is None else {first.path}
    for chooser, path in others:
        if path is None or _first_existing([(chooser, path)], marker) is None \
                or path.resolve() in seen:
            continue
        seen.add(path.resolve())
        try:
            tool = _asked_device_compiler("nvcc", homes, here, chooser, path,
                                          _file_stamp(path))
        except _NoVersion:
            continue
        closeness = _closeness(tool, wanted)
        if closeness is not None and (fit is None or closeness < fit):
            best, fit = tool, closeness
            if fit == (0, 0):
                break
    return best


@_clears(_locate_device_compiler.cache_clear, _asked_device_compiler.cache_clear)
def find_nvcc(cuda: str | None = None) -> Tool | None:
    """The CUDA compiler: ``$CUDA_HOME``/``$CUDA_PATH``, then ``PATH``, then /usr/local/cuda.

    With ``cuda``, the CUDA version a torch was built with (``torch.version.cuda``,
    ``"12.8"``), and no variable naming a usable toolkit: where the compiler found so is
    of another version, or a lone wrapper script taken for want of a toolkit on ``PATH``
    or in /usr/local/cuda, the toolkit closest to ``cuda`` among it, the one on ``PATH``,
    /usr/local/cuda and the ``cuda-<version>`` folders of :data:`CUDA_TOOLKIT_FOLDERS`
    (``/usr/local/cuda-12.8``): the same major.minor, else the same major, an older
    minor before a newer one. So one build for several environments compiles each with
    the toolkit of its torch. A toolkit ``CUDA_HOME`` or ``CUDA_PATH`` names is taken
    whatever its version (:func:`cuda_mismatch` judges it).

    Cached per the values of these variables (and the current directory, which a
    relative one is read from): values not seen before in this process are looked at
    (and the compiler found asked its version), values seen before get the answer they
    got then, unless the file the compiler is was replaced since (an upgrade in place, a
    link moved), which is asked again. The ``cuda-<version>`` folders are listed on
    every call.

    Raises:
        ToolchainError: a compiler did not answer ``--version`` in time, or the one the
            plain lookup finds gives no version.

    Example:
        >>> find_nvcc("12.8")  # doctest: +SKIP
        Tool(name='nvcc', path=PosixPath('/usr/local/cuda-12.8/bin/nvcc'), ...)
    """
    m = re.match(r"(\d+)\.(\d+)", cuda or "")
    return _device_lookup("nvcc", (int(m[1]), int(m[2])) if m else None)


def cuda_mismatch(nvcc: Tool, cuda: str, target: str) -> tuple[bool, str] | None:
    """Whether ``nvcc`` fits a torch built with CUDA ``cuda`` (``target`` names that
    torch and its environment in the messages): ``None`` for the same major.minor;
    ``(True, error)`` for another major version, whose build would not work beside torch
    (torch's own extension tooling refuses it, with a less helpful message, and only
    where the extension's own sources hold a ``.cu`` file); ``(False, note)`` for another
    minor, which torch's tooling allows."""
    m = re.match(r"(\d+)\.(\d+)", cuda)
    if m is None:
        return None
    wanted = (int(m[1]), int(m[2]))
    closeness = _closeness(nvcc, wanted)
    if closeness == (0, 0):
        return None
    # a toolkit is a release, major.minor, whatever torch's version says beyond it
    # (12.8.1): NVIDIA installs it in cuda-12.8
    release = f"{wanted[0]}.{wanted[1]}"
    env_vars = _DEVICE_COMPILERS["nvcc"][0]
    where = f"{nvcc.path}, {nvcc.found}" if nvcc.found else str(nvcc.path)
    said = (f"{target} was built with CUDA {cuda}, but nvcc {nvcc.version_str} ({where}) "
            f"is CUDA {'.'.join(str(p) for p in nvcc.version[:2])}")
    var = nvcc.chooser if nvcc.chooser in env_vars else None
    if closeness is None:
        matching = f"a CUDA {wanted[0]}.x toolkit ({release} matches torch exactly)"
        return True, (f"{said}: code compiled by another CUDA major version than torch's "
                      "does not work with it, so the build stopped before compiling; fix: "
                      + (f"point {var} at {matching}" if var
                         else _install_fix(release, matching)))
    return False, (f"{said}, a minor version apart: torch's extension tooling allows that "
                   f"(CUDA {wanted[0]}.x minor versions are compatible); for a matching "
                   "toolkit, " + (f"point {var} at a CUDA {release} toolkit" if var
                                  else _install_fix(release, "one")))


def _install_fix(cuda: str, toolkit: str) -> str:
    """The fix for a torch built with CUDA ``cuda`` (major.minor) and no fitting toolkit
    found: install it where :func:`find_nvcc` looks, or name ``toolkit`` (one that fits)
    with ``CUDA_HOME``."""
    folder = next((os.path.join(parent, f"cuda-{cuda}") for parent in CUDA_TOOLKIT_FOLDERS),
                  None)
    return (f"install the CUDA {cuda} toolkit" + (f" in {folder}" if folder else "")
            + f", where the build looks for it, or point CUDA_HOME at {toolkit}")


@_clears(_locate_device_compiler.cache_clear, _asked_device_compiler.cache_clear)
def find_hipcc() -> Tool | None:
    """The HIP compiler: ``$ROCM_HOME``/``$ROCM_PATH``, then ``PATH``, then /opt/rocm.

    Cached per the values of these variables (and the current directory, which a
    relative one is read from): values not seen before in this process are looked at
    (and the compiler found asked its version), values seen before get the answer they
    got then, unless the file the compiler is was replaced since (an upgrade in place, a
    link moved), which is asked again."""
    return _device_lookup("hipcc")


@dataclass(frozen=True)
class _HostChoice:
    """A host compiler a lookup found, and how its errors name it (as for
    :func:`_host_compiler`)."""

    path: Path
    chosen: str = ""
    fix: str = ""
    hung_fix: str = ""


def _find_cxx(cxx: str | None, search_path: str | None, here: str | None) -> Tool:
    """:func:`find_cxx` for the values of ``CXX`` (``None``: not set) and ``PATH``, and
    the current directory when one of them is relative to it (else ``None``)."""
    found = _locate_cxx(cxx, search_path, here)
    return _asked_host(found, _file_stamp(found.path))


@functools.lru_cache(maxsize=None)
def _asked_host(found: _HostChoice, stamp: _Stamp | None) -> Tool:
    """:func:`_host_compiler` for ``found``, cached per the identity of the file it leads
    to (``stamp``, :func:`_file_stamp`) as well. An error is not cached."""
    return _host_compiler(found.path, chosen=found.chosen, fix=found.fix,
                          hung_fix=found.hung_fix)


@functools.lru_cache(maxsize=None)
def _locate_cxx(cxx: str | None, search_path: str | None, here: str | None) -> _HostChoice:
    """Where :func:`_find_cxx` finds the compiler, cached per its arguments.

    Raises:
        ToolchainError: ``CXX`` names no single program, or none is found.
    """
    name = "c++" if cxx is None else cxx
    program = name
    if here is not None:
        program = _absolute_value("CXX", name, here)
        search_path = _absolute_value("PATH", search_path, here) if search_path else None
    which = shutil.which(program, path=search_path)
    if which is None and len(name.split()) > 1:
        # a launcher ("ccache g++") or flags ("g++ -m32"): torch's ninja files would
        # split it, but the link, the version probe and the up-to-date check run $CXX as
        # one program, and flags come from build.toml alone
        raise ToolchainError(
            f"CXX={name!r} is a command with arguments, but the build runs $CXX as one "
            "program; fix: point CXX at the compiler itself (CXX=g++), put compiler "
            "flags in build.toml (cxx-flags), and for ccache put its compiler links "
            "(such as /usr/lib/ccache) first on PATH instead"
        )
    if which is None and program != name:
        raise ToolchainError(
            f"CXX={name!r} names no program (no executable file {program}: a relative CXX "
            f"is read from the current directory, {here}); fix: point CXX at an installed "
            "C++ compiler (CXX=g++ or CXX=clang++, or its full path), or unset it to use "
            "c++ from PATH"
        )
    if which is None and cxx is not None:
        # the user's choice names nothing: "install g++" would not help, g++ may be there
        raise ToolchainError(
            f"CXX={name!r} names no program (no such executable file, nor a command on "
            "PATH); fix: point CXX at an installed C++ compiler (CXX=g++ or CXX=clang++, "
            "or its full path), or unset it to use c++ from PATH"
        )
    if which is None:
        raise ToolchainError(
            f"no C++ compiler found (looked for '{name}' on PATH); install g++ or clang++, "
            "or point the CXX environment variable at one"
        )
    # what to look at when it hangs: the wrapper or licensed compiler behind the name
    hung = (f"run '{which} --version' to see it wait (a wrapper script that waits, or a "
            "compiler waiting for its license server) and fix that, or ")
    if cxx is not None:
        fix = ("point CXX at an installed C++ compiler (CXX=g++ or CXX=clang++, or its full "
               "path), or unset it to use c++ from PATH")
        chosen = f"CXX={name!r} ({which})" if which != name else f"CXX={name!r}"
        hung += "point CXX at another C++ compiler (CXX=g++ or CXX=clang++)"
    else:
        fix = "install g++ or clang++, or point the CXX environment variable at one"
        chosen = f"the C++ compiler '{name}' on PATH ({which})"
        hung += "point the CXX environment variable at another C++ compiler"
    return _HostChoice(Path(which), chosen=chosen, fix=fix, hung_fix=hung)


@_clears(_locate_cxx.cache_clear, _asked_host.cache_clear)
def find_cxx() -> Tool:
    """The host C++ compiler torch's extension tooling will use (``$CXX`` or ``c++``).

    A ``CXX`` with a folder in it (``./mycc``, ``bin/g++``) and a relative ``PATH`` entry
    are read from the current directory, as a shell reads them; ``Tool.path`` is always
    absolute, since the compile runs in another directory.

    Cached per the values of ``CXX`` and ``PATH`` (and the current directory where one
    is relative to it): values not seen before in this process are looked at (and the
    compiler found asked its version), values seen before get the answer they got then,
    unless the file the compiler is was replaced since (an upgrade in place, a link
    moved), which is asked again.

    Raises:
        ToolchainError: none is found, ``CXX`` names no single program, or the program
            is no C++ compiler or does not answer; or ``CXX`` or ``PATH`` is relative to
            a current directory that cannot be read (it was removed).
    """
    return _find_cxx(os.environ.get("CXX"), os.environ.get("PATH"),
                     _here(os.environ, ("CXX", "PATH")))


def _host_compiler(path: Path, *, chosen: str = "", fix: str = "",
                   hung_fix: str = "") -> Tool:
    """A gcc or clang at ``path``, with its version.

    Raises:
        ToolchainError: ``path --version`` fails or says nothing, so it is no compiler
            (``CXX=/bin/false``); torch's extension tooling would otherwise fail on it
            with a traceback, or a program that does nothing would "compile" nothing.
            The message names the program as ``chosen`` and ends with ``fix``. Or the
            compiler did not answer within :data:`VERSION_TIMEOUT_S`: the message says
            so and ends with ``hung_fix``.
    """
    try:
        return _asked_host_compiler(path, chosen=chosen, fix=fix)
    except _NoAnswer as err:
        raise ToolchainError(
            f"{chosen or path} hung: {err}, so the build stopped before compiling"
            + (f"; fix: {hung_fix}" if hung_fix else "")) from None


def _asked_host_compiler(path: Path, *, chosen: str, fix: str) -> Tool:
    """:func:`_host_compiler`'s questions to the compiler and what they tell."""
    code, text = _ask([str(path), "--version"])
    if code != 0 or not text.strip():
        said = text.strip().splitlines()[0][:300] if text.strip() else ""
        answer = (f"exits with status {code}" + (f": {said}" if said else "")
                  if code != 0 else "prints nothing")
        raise ToolchainError(
            f"{chosen or path} is not a C++ compiler: '{path} --version' {answer}"
            + (f"; fix: {fix}" if fix else ""))
    first = text.strip().splitlines()[0]
    kind = "gcc" if ("GCC" in text or "Free Software Foundation" in text) else "clang"
    version = None
    if kind == "gcc":
        # The first line is "<program> (<package version>) <version>", and a package
        # version may hold dotted numbers of its own ("crosstool-NG 1.24.0"): ask.
        version = _parse_version(_run_version([str(path), "-dumpfullversion"]).strip(),
                                 r"^(\d+(?:\.\d+)*)$")
    version = version or _parse_version(first, r"(\d+\.\d+(?:\.\d+)?)") or (0,)
    return Tool(kind, path, version, first)


def _find_nvcc_host(cc: str | None, nvcc_ccbin: str | None, search_path: str | None,
                    here: str | None) -> Tool | None:
    """:func:`find_nvcc_host` for the values of ``CC``, ``NVCC_CCBIN`` and ``PATH``, and
    the current directory when one of them is relative to it (else ``None``).

    Raises:
        _NoAnswer: the compiler did not answer in time. Raised rather than returned as
            ``None`` so that the cache keeps no answer for it: it may answer later.
    """
    path = _locate_nvcc_host(cc, nvcc_ccbin, search_path, here)
    return None if path is None else _asked_nvcc_host(path, _file_stamp(path))


@functools.lru_cache(maxsize=None)
def _locate_nvcc_host(cc: str | None, nvcc_ccbin: str | None, search_path: str | None,
                      here: str | None) -> Path | None:
    """Where :func:`_find_nvcc_host` finds the compiler (``None``: nowhere), cached per
    its arguments."""
    name = cc or nvcc_ccbin or "gcc"
    if here is not None:
        if cc or nvcc_ccbin:
            name = _absolute_value("CC" if cc else "NVCC_CCBIN", name, here)
        search_path = _absolute_value("PATH", search_path, here) if search_path else None
    if (cc or nvcc_ccbin) and os.path.isdir(name):  # nvcc's -ccbin takes a folder
        name = os.path.join(name, "gcc")
    which = shutil.which(name, path=search_path)
    return None if which is None else Path(which)


@functools.lru_cache(maxsize=None)
def _asked_nvcc_host(path: Path, stamp: _Stamp | None) -> Tool | None:
    """The host compiler at ``path`` (``None``: it is none), cached per the identity of
    the file it leads to (``stamp``) as well.

    Raises:
        _NoAnswer: as for :func:`_find_nvcc_host`.
    """
    try:
        return _asked_host_compiler(path, chosen="", fix="")
    except _NoAnswer:
        raise
    except ToolchainError:
        return None


@_clears(_locate_nvcc_host.cache_clear, _asked_nvcc_host.cache_clear)
def find_nvcc_host() -> Tool | None:
    """The host compiler nvcc runs for the host side of ``.cu`` sources, which is not
    ``$CXX``: ``$CC`` (torch's extension tooling passes it as ``-ccbin``), else
    ``$NVCC_CCBIN`` (nvcc reads it; a folder means its ``gcc``), else ``gcc`` on PATH.
    ``None`` when it cannot be found or asked (nvcc then reports the problem itself).

    Cached per the values of these variables (and the current directory, which a
    relative one is read from): values not seen before in this process are looked at
    (and the compiler found asked its version), values seen before get the answer they
    got then, unless the file the compiler is was replaced since (an upgrade in place, a
    link moved), which is asked again. A compiler that did not answer in time is not cached, as for
    :func:`find_cxx`: it is asked again by the next lookup outside the run
    (:func:`build_run`) in which it hung.

    Raises:
        ToolchainError: a variable is relative to a current directory that cannot be
            read (it was removed).
    """
    try:
        return _find_nvcc_host(os.environ.get("CC"), os.environ.get("NVCC_CCBIN"),
                               os.environ.get("PATH"),
                               _here(os.environ, ("CC", "NVCC_CCBIN", "PATH")))
    except _NoAnswer:
        return None


# --- kernel dependencies (`depends = [...]` in build.toml) --------------------------------

#: Hugging Face's CUTLASS dependency names resolved to the C++ headers of the PyPI wheel
#: ``nvidia-cutlass``: name -> (distribution, pinned version, include dir in the package).
#: PyPI has no 4.0 wheel; 4.2 is the 4.x release there and keeps 4.0's C++ API.
_CUTLASS_INCLUDE = "cutlass_library/source/include"
HEADER_PACKAGES: dict[str, tuple[str, str, str]] = {
    "cutlass_3_5": ("nvidia-cutlass", "3.5.1.0", _CUTLASS_INCLUDE),
    "cutlass_3_6": ("nvidia-cutlass", "3.6.0.0", _CUTLASS_INCLUDE),
    "cutlass_3_8": ("nvidia-cutlass", "3.8.0.0", _CUTLASS_INCLUDE),
    "cutlass_4_0": ("nvidia-cutlass", "4.2.0.0", _CUTLASS_INCLUDE),
}

#: Dependencies that need nothing beyond what the build already has.
BUILTIN_DEPENDS = frozenset({"torch"})


@dataclass(frozen=True)
class Dependency:
    """A resolved ``depends`` entry: where its headers are and which version it is."""

    name: str
    distribution: str | None = None
    version: str | None = None
    include_dirs: tuple[Path, ...] = field(default_factory=tuple)

    def provenance(self) -> dict[str, object]:
        out: dict[str, object] = {"name": self.name}
        if self.distribution:
            out["distribution"] = self.distribution
            out["version"] = self.version
        return out


def resolve_dependency(name: str) -> Dependency:
    """Resolve one ``depends`` entry of a kernel to include directories.

    Raises:
        ToolchainError: the dependency is unknown, not installed, or not the pinned version.
    """
    if name in BUILTIN_DEPENDS:
        return Dependency(name)
    if name not in HEADER_PACKAGES:
        known = ", ".join(sorted(BUILTIN_DEPENDS | HEADER_PACKAGES.keys()))
        raise ToolchainError(
            f"kernel dependency '{name}' has no pinned package kernelforge can resolve "
            f"(no matching wheel on PyPI); kernelforge resolves: {known}"
        )
    # here, not at the top: importing importlib.metadata takes `check` and `publish`,
    # which import this module, a tenth of their time, and only `depends` needs it
    from importlib import metadata

    dist, pinned, subdir = HEADER_PACKAGES[name]
    fix = f"pip install {dist}=={pinned}"
    try:
        installed = metadata.version(dist)
    except metadata.PackageNotFoundError as err:
        raise ToolchainError(
            f"kernel dependency '{name}' needs the {dist} headers, which are not installed; "
            f"fix: {fix}"
        ) from err
    if installed != pinned:
        raise ToolchainError(
            f"kernel dependency '{name}' is pinned to {dist}=={pinned} for reproducible builds, "
            f"but {installed} is installed; fix: {fix}"
        )
    top = subdir.split("/", 1)[0]
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        raise ToolchainError(
            f"{dist} is installed but its package '{top}' cannot be found; fix: {fix}"
        )
    include = Path(next(iter(spec.submodule_search_locations))).parent / subdir
    if not include.is_dir():
        raise ToolchainError(f"{dist}=={installed} has no header directory {include}; fix: {fix}")
    return Dependency(name, dist, installed, (include,))
