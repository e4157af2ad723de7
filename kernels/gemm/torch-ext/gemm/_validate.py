"""Argument checks for the gemm entry points.

Pure Python on tensor metadata: no kernel launch, no device synchronization, usable on a
machine without a GPU. Every failure raises ``TypeError`` (wrong kind or dtype) or
``ValueError`` (wrong shape, device, precision or memory layout) naming the argument.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

BLOCK = 128
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)
PRECISIONS = ("fast", "exact")


class Problem(NamedTuple):
    m: int
    n: int
    k: int


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _require_tensor(x: object, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def _require_2d(x: torch.Tensor, name: str) -> None:
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(x.shape)}")


def _require_dtype(x: torch.Tensor, name: str, allowed: tuple[torch.dtype, ...]) -> None:
    if x.dtype not in allowed:
        names = " or ".join(str(d).replace("torch.", "") for d in allowed)
        raise TypeError(f"{name} must be {names}, got {str(x.dtype).replace('torch.', '')}")


def _require_shape(x: torch.Tensor, name: str, shape: tuple[int, int], why: str) -> None:
    if tuple(x.shape) != shape:
        raise ValueError(f"{name} must have shape {shape} ({why}), got {tuple(x.shape)}")


def has_overlap(x: torch.Tensor) -> bool:
    """True when two distinct indices of the 2-D tensor ``x`` address one element."""
    (r, c), (sr, sc) = x.shape, x.stride()
    if r <= 1 or c <= 1:
        n, s = (c, sc) if r <= 1 else (r, sr)
        return n > 1 and s == 0
    if sc == 0 or sr == 0:
        return True
    if sc <= sr:
        return sr < sc * c
    return sc < sr * r


def check_precision(precision: object) -> str:
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return precision


def check_gemm(
    a: object,
    b: object,
    a_scale: object,
    b_scale: object,
    out: object | None,
    *,
    layout: str,
) -> Problem:
    """Validate the operands of one call and return (M, N, K).

    ``layout="kn"``: the guide's convention, a (M, K), b (K, N), a_scale (KB, M),
    b_scale (KB, NB). ``layout="nt"``: a (M, K), b (N, K), a_scale (M, KB),
    b_scale (NB, KB). Any strides are accepted for the inputs; ``out`` must not have
    overlapping elements.
    """
    a = _require_tensor(a, "a")
    b = _require_tensor(b, "b")
    a_scale = _require_tensor(a_scale, "a_scale")
    b_scale = _require_tensor(b_scale, "b_scale")
    if out is not None:
        out = _require_tensor(out, "out")

    _require_dtype(a, "a", FP8_DTYPES)
    _require_dtype(b, "b", FP8_DTYPES)
    _require_dtype(a_scale, "a_scale", (torch.float32,))
    _require_dtype(b_scale, "b_scale", (torch.float32,))
    if out is not None:
        _require_dtype(out, "out", (torch.bfloat16,))

    for x, name in ((a, "a"), (b, "b"), (a_scale, "a_scale"), (b_scale, "b_scale")):
        _require_2d(x, name)
    if out is not None:
        _require_2d(out, "out")

    m, k = a.shape
    if layout == "kn":
        if b.shape[0] != k:
            raise ValueError(
                f"b must have shape (K, N) with K = a.shape[1] = {k}, got {tuple(b.shape)}"
            )
        n = b.shape[1]
        kb, nb = _ceil_div(k, BLOCK), _ceil_div(n, BLOCK)
        _require_shape(a_scale, "a_scale", (kb, m), "ceil(K/128), M")
        _require_shape(b_scale, "b_scale", (kb, nb), "ceil(K/128), ceil(N/128)")
    elif layout == "nt":
        if b.shape[1] != k:
            raise ValueError(
                f"b must have shape (N, K) with K = a.shape[1] = {k}, got {tuple(b.shape)}"
            )
        n = b.shape[0]
        kb, nb = _ceil_div(k, BLOCK), _ceil_div(n, BLOCK)
        _require_shape(a_scale, "a_scale", (m, kb), "M, ceil(K/128)")
        _require_shape(b_scale, "b_scale", (nb, kb), "ceil(N/128), ceil(K/128)")
    else:  # internal misuse, not user input
        raise ValueError(f"layout must be 'kn' or 'nt', got {layout!r}")

    if out is not None:
        _require_shape(out, "out", (m, n), "M, N")
        if has_overlap(out):
            raise ValueError(
                f"out must not have overlapping elements, got strides {tuple(out.stride())}"
            )

    device = a.device
    if device.type != "cuda":
        raise ValueError(f"a must be on a CUDA device, got {device}")
    named = [("b", b), ("a_scale", a_scale), ("b_scale", b_scale)]
    if out is not None:
        named.append(("out", out))
    for name, x in named:
        if x.device != device:
            raise ValueError(f"{name} must be on {device} like a, got {x.device}")
    return Problem(m, n, k)  # no int(): under torch.compile they may be symbolic


def check_quantize_input(x: object, dtype: object) -> torch.Tensor:
    x = _require_tensor(x, "x")
    _require_dtype(x, "x", (torch.float32, torch.bfloat16))
    _require_2d(x, "x")
    if dtype not in FP8_DTYPES:
        raise TypeError(f"dtype must be torch.float8_e4m3fn or torch.float8_e4m3fnuz, got {dtype}")
    if x.device.type != "cuda":
        raise ValueError(f"x must be on a CUDA device, got {x.device}")
    return x
