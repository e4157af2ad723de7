"""Fixtures for the gemm kernel tests.

The kernel under test comes from, in this order:
  1. ``GEMM_KERNEL_PATH``: a directory holding an importable ``gemm`` package (a
     variant directory of ``kernelforge build``, or a development build);
  2. ``GEMM_KERNEL_REPO``: a hub repository id loaded with ``kernelforge.get_kernel``;
  3. ``kernelforge.get_local_kernel`` on ``kernels/gemm``.
Tests marked ``cuda`` / ``sm90`` skip, with the reason, when the GPU is absent (the
marker handling lives in ``tests/conftest.py``).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
KERNEL_DIR = REPO / "kernels" / "gemm"


@pytest.fixture(scope="session")
def gemm_kernel() -> ModuleType:
    path = os.environ.get("GEMM_KERNEL_PATH")
    if path:
        sys.path.insert(0, path)
        return importlib.import_module("gemm")
    import kernelforge

    repo = os.environ.get("GEMM_KERNEL_REPO")
    if repo:
        return kernelforge.get_kernel(repo)
    try:
        return kernelforge.get_local_kernel(KERNEL_DIR)
    except Exception as err:  # report why, do not hide it
        pytest.skip(f"no built gemm kernel ({type(err).__name__}: {err}); "
                    "run `kernelforge build kernels/gemm` or set GEMM_KERNEL_PATH")
