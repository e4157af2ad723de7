"""ReLU kernel for CPU and CUDA tensors.

``relu(x)`` returns ``max(x, 0)`` in a new tensor; ``relu(x, out=y)`` writes into ``y``.
Supported dtypes: float64, float32, float16 and bfloat16.
"""

from __future__ import annotations

import torch

from ._ops import ops

__all__ = ["relu"]


def relu(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Elementwise ReLU (NaN propagates, as in ``torch.relu``).

    Args:
        x: the input tensor.
        out: where to write the result; a new tensor like ``x`` when omitted. It must
            have the shape, dtype and device of ``x``.

    Returns:
        ``out``, holding ``max(x, 0)``.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"relu: x must be a torch.Tensor, got {type(x).__name__}")
    if out is None:
        out = torch.empty_like(x)
    elif not isinstance(out, torch.Tensor):
        raise TypeError(f"relu: out must be a torch.Tensor, got {type(out).__name__}")
    elif out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(
            f"relu: out must match x (shape {tuple(x.shape)}, {x.dtype}, {x.device}); "
            f"got shape {tuple(out.shape)}, {out.dtype}, {out.device}"
        )
    ops.relu(out, x)
    return out
