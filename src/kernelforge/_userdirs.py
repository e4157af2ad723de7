"""The user's cache and configuration directories (``~/.cache/kernelforge`` and
``~/.config/kernelforge`` on Linux), through platformdirs.

Where the home directory cannot be found (``HOME`` unset or relative, as in a container
started with a user id that has no entry in ``/etc/passwd``), platformdirs raises a bare
``RuntimeError`` (a traceback at the command line), and its older releases return a
path that starts with ``~``, which would put the hub in a folder named ``~`` of the
current directory. Both become an error that names the variable to set instead.
"""

from __future__ import annotations

import os
from pathlib import Path

from kernelforge.errors import KernelforgeError

__all__ = ["user_dir"]


def user_dir(kind: str, what: str, variable: str,
             error: type[KernelforgeError] = KernelforgeError) -> Path:
    """kernelforge's folder in the user's ``cache`` or ``config`` directory.

    Args:
        kind: ``"cache"`` or ``"config"``.
        what: what the caller keeps there, for the error (``"the local hub"``).
        variable: the environment variable that names that place instead, for the fix.
        error: the class of the error raised.

    Returns:
        The absolute directory (not created here).

    Raises:
        KernelforgeError: of class ``error``: the home directory cannot be found.
    """
    import platformdirs

    find = platformdirs.user_cache_dir if kind == "cache" else platformdirs.user_config_dir
    try:
        found: str | None = find("kernelforge")
    except RuntimeError:  # platformdirs 4.3 and newer: no absolute home directory
        found = None
    if found is not None and os.path.isabs(found):
        return Path(found)
    xdg = "XDG_CACHE_HOME" if kind == "cache" else "XDG_CONFIG_HOME"
    fix = (f"set HOME or {xdg} to an absolute path" if variable == xdg else
           f"set {variable} to a directory, or set HOME (or {xdg}) to an absolute path")
    raise error(f"cannot tell which folder holds {what}: the home directory is unknown "
                f"({_why_unknown(xdg, found)}); fix: {fix}")


def _why_unknown(xdg: str, found: str | None) -> str:
    """What, of what platformdirs reads, leaves no absolute folder: ``HOME``, the user
    database (read where ``HOME`` is not set), the XDG variable."""
    home = os.environ.get("HOME")
    said = []
    if home is None:
        said.append("HOME is not set")
    elif not os.path.isabs(home):
        said.append(f"HOME={home!r} is not an absolute path")
    if (home is None or not os.path.isabs(home)) and not _in_user_database():
        said.append(f"user id {os.getuid()} has no home directory in the user database")
    value = os.environ.get(xdg)
    if value and not os.path.isabs(value):
        said.append(f"{xdg}={value!r} is not an absolute path")
    return " and ".join(said) or f"platformdirs gave {found!r}"


def _in_user_database() -> bool:
    """Whether the user database gives this user an absolute home directory (where there
    is none, as on Windows, nothing is said of it)."""
    try:
        import pwd

        return os.path.isabs(pwd.getpwuid(os.getuid()).pw_dir)
    except ImportError:
        return True
    except KeyError:
        return False
