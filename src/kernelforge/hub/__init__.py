"""Hub backends: where published kernel builds live.

A hub holds repositories ``org/name`` laid out like a Hugging Face kernel repository:
builds on branch ``v<version>`` under ``build/<variant>/``, the card on the version
branch and on ``main``. The embedded :class:`LocalHub` keeps them in a directory on this
machine; :class:`HfHub` (module :mod:`kernelforge.hub.hf`) talks to the Hugging Face Hub.
Both subclass the :class:`~kernelforge.hub.base.Hub` protocol (any class with its
methods is a hub too).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from kernelforge.hub.base import Fetched, Hub, Revision, is_hub, validate_repo_id
from kernelforge.hub.local import LocalHub, default_root

if TYPE_CHECKING:  # pragma: no cover
    from kernelforge.hub.hf import HfHub

__all__ = ["Fetched", "HfHub", "Hub", "LocalHub", "Revision", "as_hub", "default_root",
           "validate_repo_id"]

#: ``hub=`` (and ``$KERNELFORGE_HUB``) values that name the Hugging Face Hub.
HF_NAMES = ("hf", "huggingface")


def __getattr__(name: str) -> Any:
    if name == "HfHub":  # imported on first use: it pulls in the download cache
        from kernelforge.hub.hf import HfHub

        return HfHub
    raise AttributeError(f"module 'kernelforge.hub' has no attribute {name!r}")


def as_hub(hub: Hub | str | os.PathLike[str] | None) -> Hub:
    """Turn a ``hub=`` argument into a hub.

    Args:
        hub: a hub object (:class:`LocalHub`, :class:`HfHub`), ``"hf"`` for the Hugging
            Face Hub, a hub root directory, or ``None`` for the default
            (``$KERNELFORGE_HUB``, a directory or ``hf``, else the local hub in the user
            cache; read now).

    Returns:
        The hub.

    Raises:
        TypeError: ``hub`` is none of these.
        ValueError: ``hub`` is an empty string (:class:`LocalHub` refuses it; ``None``
            is the default hub, and an empty ``$KERNELFORGE_HUB`` counts as unset).
    """
    if is_hub(hub):
        return hub
    if hub is None:
        env = os.environ.get("KERNELFORGE_HUB", "")
        if env.strip().lower() in HF_NAMES:
            hub = env.strip().lower()
    if isinstance(hub, str) and hub.lower() in HF_NAMES:
        from kernelforge.hub.hf import HfHub

        return HfHub()
    if hub is None or isinstance(hub, (str, os.PathLike)):
        return LocalHub(hub)
    raise TypeError(
        f"hub: expected a LocalHub, an HfHub, 'hf', a directory or None, got "
        f"{type(hub).__name__}"
    )
