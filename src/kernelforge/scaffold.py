"""``kernelforge init``: a new kernel project in the guide's layout, made from the bundled
relu example with the kernel's name substituted.

The new kernel's Python name (its name with ``-`` as ``_``) replaces the example's
identifiers: the package ``torch-ext/relu/``, the function and op ``relu``, and the names
built on it (``relu_cpu``, ``relu_cuda``, ``relu_kernel``, ...). Prose that refers to
PyTorch's own ``torch.relu`` is left alone.
"""

from __future__ import annotations

import keyword
import re
import shutil
from pathlib import Path

from kernelforge._paths import HERE, path_word, refuse_empty_path
from kernelforge.errors import KernelforgeError
from kernelforge.manifest import suggest_name

TEMPLATE = Path(__file__).with_name("examples") / "relu"
#: The rule of ``general.name`` (manifest.py, as Hugging Face's builder has it): a one-letter
#: name is refused there, so it is refused here too.
_NAME = re.compile(r"^[a-z][-a-z0-9]*[a-z0-9]\Z")
#: The example's identifiers: ``relu`` alone or as the head of a longer identifier
#: (``relu_cpu``), not PyTorch's ``torch.relu``.
_TEMPLATE_IDENT = re.compile(r"(?<!torch\.)\brelu(?=\b|_)")
_TEXT_SUFFIXES = {".py", ".cpp", ".h", ".cu", ".toml", ".md"}

# Lowercase C++ keywords and alternative operator spellings (C++20).
_CXX_KEYWORDS = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t
    char16_t char32_t class compl concept const consteval constexpr constinit const_cast
    continue co_await co_return co_yield decltype default delete do double dynamic_cast
    else enum explicit export extern false float for friend goto if inline int long
    mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected
    public register reinterpret_cast requires return short signed sizeof static
    static_assert static_cast struct switch template this thread_local throw true try
    typedef typeid typename union unsigned using virtual void volatile wchar_t while xor
    xor_eq
""".split())
# Names the generated code already uses, or that C++ reserves, each with the reason.
_TAKEN: dict[str, str] = {
    "main": "C++ reserves it for a program's entry point",
    **{n: "it is a C++ namespace of the standard library, PyTorch or CUDA, which the "
          "generated sources include" for n in
       ("std", "at", "c10", "torch", "caffe2", "aten", "pybind11", "fmt", "cuda", "cub",
        "thrust", "hip")},
    **{n: "it is a C library or compiler macro" for n in
       ("assert", "errno", "offsetof", "setjmp", "stdin", "stdout", "stderr", "linux", "unix",
        "major", "minor")},
    "ops": "the generated torch_binding.cpp and __init__.py use it for the op library",
    **{n: "the generated kernel sources use it for a helper" for n in
       ("check_args", "scalar_t")},
    **{n: "the generated __init__.py calls the Python builtin of that name" for n in
       ("isinstance", "type", "tuple")},
    # A function of the C library of the same name is fine (the binding casts to the op's
    # type): what clashes is another kind of entity, or a macro.
    **{n: "it is a variable, type or macro of the C library headers that torch's headers "
          "include" for n in """
        alloca assert_perror be16toh be32toh be64toh daylight environ fd_mask fd_set
        getdate_err htobe16 htobe32 htobe64 htole16 htole32 htole64 isalnum_l isalpha_l
        isascii isascii_l isblank_l iscntrl_l isdigit_l isgraph_l islower_l isprint_l
        ispunct_l isspace_l issubnormal isupper_l isxdigit_l le16toh le32toh le64toh
        math_errhandling optarg opterr optind optopt program_invocation_name
        program_invocation_short_name pthread_cleanup_pop pthread_cleanup_pop_restore_np
        pthread_cleanup_push pthread_cleanup_push_defer_np sched_priority signgam st_atime
        st_ctime st_mtime strdupa strndupa timeradd timerclear timercmp timerisset timersub
        timezone toascii toascii_l tzname va_arg va_copy va_end va_list va_start
    """.split()},
    **{n: "it is a type of Python's C API (Python.h), which the generated binding "
          "includes" for n in """
        allocfunc binaryfunc crossinterpdatafunc descrgetfunc descrsetfunc destructor
        digit freefunc getattrfunc getattrofunc getbufferproc getiterfunc getter hashfunc
        initproc inquiry iternextfunc lenfunc newfunc objobjargproc objobjproc printfunc
        releasebufferproc reprfunc richcmpfunc sdigit sendfunc setattrfunc setattrofunc
        setentry setter ssizeargfunc ssizeobjargproc ssizessizeargfunc
        ssizessizeobjargproc stwodigits ternaryfunc traverseproc twodigits unaryfunc
        vectorcallfunc visitproc wrapperfunc wrapperfunc_kwds
    """.split()},
    **{n: "it is a namespace or name of PyTorch's or CUDA's headers, which the generated "
          "sources include" for n in
       ("detail", "ska", "ska_ordered", "c10_complex_math", "nv", "declval",
        "cl_context_flags", "cl_event_flags")},
}


# Type names of the CUDA headers the generated CUDA source includes (a function of the
# same name is "redeclared as a different kind of entity"): half and bfloat16 types,
# dim3 and the vector types (float4, uchar2, longlong1, double4_32a, ...).
_CUDA_TYPES = re.compile(
    r"^(?:half2?|nv_bfloat162?|nv_half2?|dim3"
    r"|(?:u?char|u?short|u?int|u?long|u?longlong|float|double)[1-4](?:_(?:16|32)a)?)$"
)


# Types of glibc's <sys/types.h>, which torch's headers include: uint, ushort, ulong and
# the BSD names u_char, u_short, u_int, u_long, u_quad.
_GLIBC_TYPES = re.compile(r"^(?:u(?:short|int|long)|u_(?:char|short|int|long|quad))$")


def _name_problem(python_name: str) -> str | None:
    """Why ``python_name`` cannot name the generated package, function and C++ op, if so."""
    if keyword.iskeyword(python_name):
        return "it is a Python keyword"
    if python_name in _CXX_KEYWORDS:
        return "it is a C++ keyword"
    if python_name.endswith("_t"):
        # size_t, int64_t, ptrdiff_t, uint8_t, off_t, pid_t, ...: the generated function
        # would be "redeclared as a different kind of entity"
        return ("names ending in '_t' are reserved for types by C and POSIX (size_t, "
                "int64_t, ptrdiff_t, ...), and the generated C++ function would clash with "
                "such a type of the headers it includes")
    if _CUDA_TYPES.match(python_name):
        return "it is a type of the CUDA headers the generated CUDA source includes"
    if _GLIBC_TYPES.match(python_name):
        return "it is a type of the C library headers that torch's headers include"
    return _TAKEN.get(python_name)


def render(text: str, python_name: str) -> str:
    """The template text ``text`` with the example's identifiers renamed to ``python_name``.

    Example:
        >>> render("ops.relu(out, x)  # as in torch.relu", "my_relu")
        'ops.my_relu(out, x)  # as in torch.relu'
    """
    renamed = [_TEMPLATE_IDENT.sub(python_name, line) for line in text.split("\n")]
    return "\n".join(_realigned(text.split("\n"), renamed))


def _open_paren(line: str) -> int | None:
    """The column of the last parenthesis ``line`` leaves open, if any."""
    stack = []
    for column, char in enumerate(line):
        if char == "(":
            stack.append(column)
        elif char == ")" and stack:
            stack.pop()
    return stack[-1] if stack else None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _realigned(original: list[str], renamed: list[str]) -> list[str]:
    """``renamed`` with the lines that continue an open parenthesis aligned under it
    again: a longer or shorter name before the parenthesis moved it."""
    out = list(renamed)
    group: tuple[int, int] | None = None  # (indent in the template, indent now)
    for i in range(1, len(original)):
        was, now = _open_paren(original[i - 1]), _open_paren(out[i - 1])
        indent = _indent(original[i])
        if was is not None and now is not None and indent == was + 1:
            group = (indent, now + 1)
        elif group is None or indent != group[0] or not original[i].strip():
            group = None
            continue
        out[i] = " " * group[1] + out[i].lstrip(" ")
    return out


def check_name(name: str) -> None:
    """Refuse a kernel name :func:`init_project` cannot use, before anything is written
    (``kernelforge init`` checks it as it reads its arguments).

    Raises:
        KernelforgeError: the name is not ``^[a-z][-a-z0-9]*[a-z0-9]$`` (with the name
            meant, where one is close), or the code generated for it would not compile
            or import (:func:`_name_problem`), with names that would.
    """
    if not _NAME.match(name):
        near = suggest_name(name, default="")
        raise KernelforgeError(
            f"invalid kernel name {name!r}: use lowercase letters, digits and '-', at least "
            "2 characters, starting with a letter and ending with a letter or digit "
            + (f"(did you mean '{near}'?)" if _NAME.match(near) else "(e.g. 'my-relu')")
        )
    python_name = name.replace("-", "_")
    problem = _name_problem(python_name)
    if problem is not None:
        fine = [n for n in (f"my-{name}", f"{name}-kernel")
                if _name_problem(n.replace("-", "_")) is None]
        raise KernelforgeError(
            f"invalid kernel name {name!r}: the generated Python package, function and C++ "
            f"op are named {python_name!r}, and {problem}; choose another name, e.g. "
            + " or ".join(f"'{n}'" for n in fine)
        )


#: What to pass instead of an empty directory to :func:`init_project`.
INIT_DIRECTORY_GIVE = (f"the directory to create the project in ({HERE}), or nothing (None "
                       "in Python) for ./NAME")


def init_project(name: str, directory: str | Path | None = None) -> Path:
    """Create a project for kernel ``name`` with a working relu-style op for cpu and cuda.

    Args:
        name: kernel name (``^[a-z][-a-z0-9]*[a-z0-9]$``); the Python package and function
            and the C++ op use it with ``-`` replaced by ``_``, so it must not be a
            Python or C++ keyword, a C or CUDA type name (``size_t``, any name ending in
            ``_t``, ``half``, ``float4``) or a name the generated code already uses
            (``main``, ``torch``, ``std``, ``ops``, ...).
        directory: where to create the project (default: ``./<name>``); must not exist,
            or be empty but for ``.git`` (a fresh ``git init`` or clone).

    Returns:
        The project directory.

    Raises:
        KernelforgeError: the name is invalid, or the directory holds entries other
            than ``.git`` (the message names one), is not a directory, or cannot be
            created.
        ValueError: ``directory`` is an empty or blank string (it would mean the
            current directory).

    Example:
        >>> init_project("my-relu", Path("/tmp/my-relu"))  # doctest: +SKIP
        PosixPath('/tmp/my-relu')
    """
    check_name(name)
    refuse_empty_path(directory, "directory", "a project directory", INIT_DIRECTORY_GIVE)
    python_name = name.replace("-", "_")
    dest = Path(directory) if directory is not None else Path(name)
    if dest.exists() and not dest.is_dir():
        raise KernelforgeError(
            f"{dest} exists and is not a directory; choose another directory"
        )
    blocking = _blocking_entries(dest)
    if "build.toml" in blocking:
        raise KernelforgeError(_already_a_project(dest, name))
    if blocking:
        more = len(blocking) - 1
        raise KernelforgeError(
            f"{dest} exists and is not empty: it holds {blocking[0]}"
            + (f" and {more} other entr{'y' if more == 1 else 'ies'}" if more else "")
            + "; init writes only into a new or empty directory, or one that holds only "
            ".git (a fresh 'git init' or clone); choose another directory, or move "
            f"{'it' if not more else 'them'} out of the way"
        )
    try:
        _copy_template(dest, name, python_name)
    except OSError as err:
        raise KernelforgeError(
            f"cannot create the project in {dest}: {err.strerror or err} "
            f"({err.filename or dest}); choose a directory you can write to"
        ) from err
    return dest


#: What a directory may hold and still take a new project: a repository's metadata
#: (``.git``, a folder, or a file in a worktree or submodule), as ``git init`` or a clone
#: of an empty repository leaves it.
_VCS_ENTRIES = frozenset({".git"})


def _already_a_project(dest: Path, name: str) -> str:
    """The error for ``init`` run over a kernel project (a second run of the same
    ``kernelforge init``, most often): the project is left as it is, and the commands for
    what was likely meant, its build or a new project elsewhere."""
    import os
    import shlex

    beside = dest.absolute()  # of '.' too, which has no name to add to
    beside = beside.with_name(f"{beside.name}-2")
    if not dest.is_absolute():
        beside = Path(os.path.relpath(beside))
    return (f"{dest} exists and is not empty: it holds a kernel project already (its "
            "build.toml), which init leaves as it is; to build that project, run "
            f"'kernelforge build {shlex.quote(path_word(dest))}'; to start another, give init "
            f"a new directory, e.g. 'kernelforge init {name} {shlex.quote(path_word(beside))}'")


def _blocking_entries(dest: Path) -> list[str]:
    """The names in ``dest`` that keep ``init`` from writing there, sorted (empty when
    ``dest`` does not exist or holds only :data:`_VCS_ENTRIES`)."""
    if not dest.is_dir():
        return []
    return sorted(e.name for e in dest.iterdir() if e.name not in _VCS_ENTRIES)


#: The ``.gitignore`` of a new project, unless the template has its own: the build's
#: outputs, and Python's bytecode and pytest's cache, which running the project's tests
#: writes. Untracked, they would show in ``git status``; kernelforge's own dirty check
#: leaves them out anyway, as its source hash does. (Hugging Face's template ignores
#: ``build``.)
GITIGNORE = """\
# kernelforge build's outputs: the variants and its work folder
/build/
/.kernelforge/
# what running the tests writes
__pycache__/
/.pytest_cache/
"""


def _render_part(part: str, python_name: str) -> str:
    """A file or folder name of the template for ``python_name``: as :func:`render` has
    it, and ``test_relu.py`` as ``test_<python_name>.py`` (``relu`` after ``_`` is not an
    identifier of its own to :func:`render`)."""
    if part == "test_relu.py":
        return f"test_{python_name}.py"
    return render(part, python_name)


def _card(text: str, name: str, python_name: str) -> str:
    """The template's card (``README.md``) for kernel ``name``: its title and the
    repository ids in it (``<org>/relu``) take the kernel's name, dashes and all; the
    rest is :func:`render`'s, the function and package named ``python_name``."""
    text = render(text, python_name)
    text = re.sub(rf"(?m)^# {python_name}$", f"# {name}", text, count=1)
    return text.replace(f"<org>/{python_name}", f"<org>/{name}")


def _copy_template(dest: Path, name: str, python_name: str) -> None:
    """Write the example project into ``dest`` for kernel ``name``, with a
    ``.gitignore`` (:data:`GITIGNORE`)."""
    dest.mkdir(parents=True, exist_ok=True)
    for path in sorted(TEMPLATE.rglob("*")):
        rel = path.relative_to(TEMPLATE)
        if "__pycache__" in rel.parts or rel.parts[0] in ("build", ".kernelforge"):
            continue
        target = dest / Path(*(_render_part(p, python_name) for p in rel.parts))
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel.name == "build.toml":
            # The kernel name keeps its dashes; every other use is the Python name.
            text = render(path.read_text(), python_name)
            text = re.sub(r'(?m)^name = ".*"$', f'name = "{name}"', text, count=1)
            # The example's hub repository is not the new kernel's: publish takes --repo.
            # The table goes with the blank line after it: the one before it stays.
            text = re.sub(r"(?m)^\[general\.hub\]\n[^\[]*", "", text)
            target.write_text(text)
        elif rel.name == "README.md":
            target.write_text(_card(path.read_text(), name, python_name))
        elif path.suffix in _TEXT_SUFFIXES:
            target.write_text(render(path.read_text(), python_name))
        else:
            shutil.copyfile(path, target)
    gitignore = dest / ".gitignore"
    if not gitignore.exists():
        gitignore.write_text(GITIGNORE)
