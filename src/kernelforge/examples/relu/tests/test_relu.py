"""Tests of the kernel's op relu against PyTorch's ``torch.relu``, on each device here.

Build the kernel first (``kernelforge build .``), then run ``python -m pytest tests`` in
the project folder. They load the build in ``build/`` with ``get_local_kernel``, its files
checked as a published build's are; they are not part of what is published. Extend them
as the op changes, and add tests for each op you add.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch

from kernelforge import get_local_kernel

PROJECT = Path(__file__).resolve().parent.parent
# A ROCm build of PyTorch runs AMD GPU tensors as "cuda" tensors.
GPU_BACKEND = "rocm" if torch.version.hip else "cuda"
DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


def load(device: str) -> ModuleType:
    """The build for ``device``'s backend: each backend's op runs on its own tensors."""
    return get_local_kernel(PROJECT, backend="cpu" if device == "cpu" else GPU_BACKEND)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_agrees_with_torch(device: str, dtype: torch.dtype) -> None:
    x = torch.randn(1000, 37, device=device).to(dtype)
    x[0, :3] = torch.tensor([float("nan"), float("-inf"), float("inf")])
    out = torch.full_like(x, 7.0)  # any element the op does not write shows as 7
    got = load(device).relu(x, out=out)
    assert got is out
    torch.testing.assert_close(got, torch.relu(x), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
def test_strided_and_empty_tensors(device: str) -> None:
    relu = load(device).relu
    x = torch.randn(64, 48, device=device).t()  # not contiguous
    torch.testing.assert_close(relu(x), torch.relu(x), rtol=0, atol=0)
    out = torch.zeros(96, 64, device=device)[::2]  # a strided view to write into
    relu(x, out=out)
    torch.testing.assert_close(out, torch.relu(x), rtol=0, atol=0)
    assert relu(torch.empty(0, 3, device=device)).shape == (0, 3)


@pytest.mark.parametrize("device", DEVICES)
def test_refuses_an_out_that_does_not_match(device: str) -> None:
    x = torch.randn(8, device=device)
    with pytest.raises(ValueError, match="out must match x"):
        load(device).relu(x, out=torch.empty(9, device=device))
