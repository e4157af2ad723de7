"""The gemm kernel for the development scripts in this folder.

From GEMM_KERNEL_PATH (a directory holding an importable ``gemm`` package, e.g. a
development build) when set, else through kernelforge from the hub repository
GEMM_KERNEL_REPO (default ``kernels-community/gemm``).
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType


def load_kernel() -> ModuleType:
    path = os.environ.get("GEMM_KERNEL_PATH")
    if path:
        sys.path.insert(0, path)
        return importlib.import_module("gemm")
    import kernelforge

    return kernelforge.get_kernel(os.environ.get("GEMM_KERNEL_REPO", "kernels-community/gemm"))
