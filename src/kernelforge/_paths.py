"""Paths given empty, as arguments or in the environment.

An empty path argument is almost always a variable that was not set (``kernelforge build
"$PROJECT"``, ``hub=os.environ.get("HUB", "")``). Read as a path it names the current
directory, so a command would build, publish into, clear or read from wherever it
happened to run. Every path argument of the command line and of the public functions is therefore
refused when it is empty or blank, with one message that names the argument and what to
pass (:func:`empty_path_why`); ``"."`` still names the current directory.

A path variable (``KERNELFORGE_HUB``, ``KERNELFORGE_CACHE``, ``KERNELFORGE_CONFIG``) set
to an empty or blank value counts as unset instead (:func:`env_path`), as most tools
read such variables: ``KERNELFORGE_CACHE= kernelforge ...`` is how one clears a
variable for one command.

A file or folder whose name is only blanks, made on purpose, is still named by ``./``
before it (``kernelforge check './ '``): a refusal says so where one is there
(:func:`blank_name_hint`), and a path the library shows as a command's argument takes
that form (:func:`path_word`).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["HERE", "blank_name_hint", "empty_path_why", "env_path", "is_empty_path",
           "path_word", "refuse_empty_path"]

#: The hint every refusal of a directory argument gives for the current directory.
HERE = "'.' for the current directory"


def empty_path_why(what: str, give: str, *, would: str = "mean the current directory") -> str:
    """Why an empty path is refused and what to pass instead, the words every refusal
    shares (the library's after ``argument:``, the command line's after ``'':``).

    Args:
        what: what the argument names, with its article (``"a hub"``).
        give: what to pass instead; for a directory argument it ends with :data:`HERE`.
        would: what the empty path would do, where that is not to name the current
            directory (``"read as --sign left out"``, for an option of the command
            line whose empty value reads as none).
    """
    return f"an empty path is not {what} (it would {would}); pass {give}"


def is_empty_path(value: object) -> bool:
    """Whether ``value`` is an empty or blank string, which a path argument refuses.
    Other values (``None``, path objects) are the caller's to judge: ``Path("")`` is
    already ``.``, so only a string can tell an empty path from the current directory."""
    return isinstance(value, str) and not value.strip()


def refuse_empty_path(value: object, argument: str, what: str, give: str) -> None:
    """Refuse ``value`` when it is an empty or blank string (:func:`is_empty_path`).

    Args:
        value: the argument as given.
        argument: its name, which the message starts with.
        what, give: as for :func:`empty_path_why`.

    Raises:
        ValueError: ``value`` is an empty or blank string.
    """
    if is_empty_path(value):
        raise ValueError(f"{argument}: {empty_path_why(what, give)}{blank_name_hint(value)}")


def blank_name_hint(value: object) -> str:
    """The end of a refusal of the blank path ``value`` where a file or folder of that
    name is there all the same (made on purpose): how to name it; else ``""``."""
    if not isinstance(value, str) or not value or not os.path.lexists(value):
        return ""
    import shlex

    return f"; to name the entry {value!r} that is here, pass {shlex.quote(path_word(value))}"


def path_word(path: str | os.PathLike[str]) -> str:
    """``path`` as it is written as a command's argument: as given, with ``./`` before a
    relative one whose name is only blanks (``Path("./ ")`` reads ``" "``), which a path
    argument would refuse as empty. Quote it (``shlex.quote``) for a shell."""
    text = os.fspath(path)
    return os.path.join(".", text) if is_empty_path(text) else text


def env_path(name: str) -> Path | None:
    """The path the environment variable ``name`` holds (a leading ``~`` is the home
    directory), read now; ``None`` where it is unset, empty or blank."""
    value = os.environ.get(name, "")
    if not value.strip():
        return None
    return Path(os.path.expanduser(value))
