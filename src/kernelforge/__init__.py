"""kernelforge: build, share and load GPU compute kernels for PyTorch.

Importing this package is cheap: it imports neither torch nor any compiler tooling.
The public functions are resolved lazily on first use.

Example:
    >>> from kernelforge import get_kernel
    >>> relu = get_kernel("kernels-community/relu")   # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "get_kernel": "kernelforge.loader",
    "get_local_kernel": "kernelforge.loader",
    "get_locked_kernel": "kernelforge.loader",
    "has_kernel": "kernelforge.loader",
    "kernel_info": "kernelforge.loader",
    "load_kernel": "kernelforge.loader",
    "load_variant": "kernelforge.loader",
    "lock_project": "kernelforge.lock",
    "download_locked": "kernelforge.lock",
    "load_manifest": "kernelforge.manifest",
    "Manifest": "kernelforge.manifest",
    "Variant": "kernelforge.variants",
    "SystemFacts": "kernelforge.variants",
    "detect_system": "kernelforge.variants",
    "resolve_variant": "kernelforge.variants",
    "build_project": "kernelforge.build",
    "LocalHub": "kernelforge.hub",
    "HfHub": "kernelforge.hub.hf",
    "KernelforgeError": "kernelforge.errors",
    "ManifestError": "kernelforge.errors",
    "VariantError": "kernelforge.errors",
    "VariantNotFoundError": "kernelforge.errors",
    "BuildError": "kernelforge.errors",
    "ToolchainError": "kernelforge.errors",
    "HubError": "kernelforge.errors",
    "IntegrityError": "kernelforge.errors",
    "TrustError": "kernelforge.errors",
    "LockError": "kernelforge.errors",
}

__all__ = [
    "BuildError",
    "HfHub",
    "HubError",
    "IntegrityError",
    "KernelforgeError",
    "LocalHub",
    "LockError",
    "Manifest",
    "ManifestError",
    "SystemFacts",
    "ToolchainError",
    "TrustError",
    "Variant",
    "VariantError",
    "VariantNotFoundError",
    "build_project",
    "detect_system",
    "download_locked",
    "get_kernel",
    "get_local_kernel",
    "get_locked_kernel",
    "has_kernel",
    "kernel_info",
    "load_kernel",
    "load_manifest",
    "load_variant",
    "lock_project",
    "resolve_variant",
    "__version__",
]

if TYPE_CHECKING:  # pragma: no cover
    from kernelforge.build import build_project
    from kernelforge.errors import (
        BuildError,
        HubError,
        IntegrityError,
        KernelforgeError,
        LockError,
        ManifestError,
        ToolchainError,
        TrustError,
        VariantError,
        VariantNotFoundError,
    )
    from kernelforge.hub import LocalHub
    from kernelforge.hub.hf import HfHub
    from kernelforge.loader import (
        get_kernel,
        get_local_kernel,
        get_locked_kernel,
        has_kernel,
        kernel_info,
        load_kernel,
        load_variant,
    )
    from kernelforge.lock import download_locked, lock_project
    from kernelforge.manifest import Manifest, load_manifest
    from kernelforge.variants import SystemFacts, Variant, detect_system, resolve_variant


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kernelforge' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
