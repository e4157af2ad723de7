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
    home = os.environ.get("HOME")
    said = "HOME is not set" if home is None else f"HOME={home!r} is not an absolute path"
    if hasattr(os, "getuid"):
        said += f" and user id {os.getuid()} has no home directory in the user database"
    xdg = "XDG_CACHE_HOME" if kind == "cache" else "XDG_CONFIG_HOME"
    raise error(f"cannot tell which folder holds {what}: the home directory is unknown "
                f"({said}); fix: set {variable} to a directory, or set HOME (or {xdg}) to an "
                "absolute path")
