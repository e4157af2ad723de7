"""Hub backends: where published kernel builds live.

A hub holds repositories ``org/name`` laid out like a Hugging Face kernel repository:
builds on branch ``v<version>`` under ``build/<variant>/``, the card on ``main``. The
embedded :class:`LocalHub` keeps them in a directory on this machine.
"""

from __future__ import annotations

import os

from kernelforge.hub.local import LocalHub, Revision, default_root, validate_repo_id

__all__ = ["LocalHub", "Revision", "as_hub", "default_root", "validate_repo_id"]


def as_hub(hub: LocalHub | str | os.PathLike[str] | None) -> LocalHub:
    """Turn a ``hub=`` argument into a hub.

    Args:
        hub: a :class:`LocalHub`, a hub root directory, or ``None`` for the default
            (``$KERNELFORGE_HUB`` or the user cache, read now).

    Returns:
        The :class:`LocalHub`.

    Raises:
        TypeError: ``hub`` is none of these.
    """
    if isinstance(hub, LocalHub):
        return hub
    if hub is None or isinstance(hub, (str, os.PathLike)):
        return LocalHub(hub)
    raise TypeError(f"hub: expected a LocalHub, a directory or None, got {type(hub).__name__}")
