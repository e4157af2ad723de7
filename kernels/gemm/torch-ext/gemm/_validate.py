"""Argument checks for the gemm entry points.

Pure Python on tensor metadata: no kernel launch, no device synchronization, usable on a
machine without a GPU. Every failure raises ``TypeError`` (wrong kind, layout or dtype) or
``ValueError`` (wrong shape, device, precision or memory layout) naming the argument.
The fake implementations (``__init__.py``) run the same checks with ``fake=True``: on any
device, meta and FakeTensor included, as long as every tensor is on ``a``'s.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch._subclasses.fake_tensor import FakeTensor

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
    if x.layout != torch.strided:  # sparse: no strides, no kernel of these ops
        raise TypeError(f"{name} must be a dense (strided) tensor, got {x.layout}; "
                        f"fix: pass {name}.to_dense()")
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


def _gcd(x, y):
    # math.gcd takes no symbolic sizes (torch.compile traces these checks).
    while y:
        x, y = y, x % y
    return x


def has_overlap(x: torch.Tensor) -> bool:
    """True when two distinct indices of the 2-D tensor ``x`` address one element.

    Exact for every 2-D layout. With sizes r, c > 1 and strides sr, sc > 0, indices
    (i, j) and (i + di, j + dj) meet when di * sr = -dj * sc, whose smallest nonzero
    solution is |di| = sc / g, |dj| = sr / g with g = gcd(sr, sc): two indices meet exactly
    when that step fits in the tensor, sc / g <= r - 1 and sr / g <= c - 1. So
    interleaved rows, such as shape (2, 3) with strides (3, 2), do not overlap.
    """
    (r, c), (sr, sc) = x.shape, x.stride()
    if r == 0 or c == 0:
        return False  # no elements
    if r == 1 or c == 1:
        n, s = (c, sc) if r == 1 else (r, sr)
        return n > 1 and s == 0
    if sr == 0 or sc == 0:
        return True
    if (sc == 1 and sr >= c) or (sr == 1 and sc >= r):
        return False  # row- or column-major, any pitch: the usual case, decided at once
    g = _gcd(sr, sc)
    return sc // g <= r - 1 and sr // g <= c - 1


def _has_memory(x: torch.Tensor) -> bool:
    """Whether ``x.data_ptr()`` is a real address (meta and fake tensors give 0)."""
    return not x.is_meta and not isinstance(x, FakeTensor)


def _byte_span(x: torch.Tensor) -> tuple[int, int]:
    """The addresses [first, last) that ``x``'s elements lie in (empty: first == last)."""
    if x.numel() == 0:
        return 0, 0
    first = x.data_ptr()
    last = sum((n - 1) * s for n, s in zip(x.shape, x.stride(), strict=True))  # strides are >= 0
    return first, first + (last + 1) * x.element_size()


def shares_memory(x: torch.Tensor, y: torch.Tensor) -> bool:
    """True when the address ranges of ``x`` and ``y`` intersect.

    Conservative: two views that interleave without touching a common byte count as
    sharing. Meta and fake tensors hold no memory and share none.
    """
    if not (_has_memory(x) and _has_memory(y)):
        return False
    x0, x1 = _byte_span(x)
    y0, y1 = _byte_span(y)
    return x0 < x1 and y0 < y1 and x0 < y1 and y0 < x1


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
    fake: bool = False,
) -> Problem:
    """Validate the operands of one call and return (M, N, K).

    ``layout="kn"``: the guide's convention, a (M, K), b (K, N), a_scale (KB, M),
    b_scale (KB, NB). ``layout="nt"``: a (M, K), b (N, K), a_scale (M, KB),
    b_scale (NB, KB). Any strides are accepted for the inputs; ``out`` must not have
    overlapping elements nor share memory with an input (the kernels would read what
    they write).

    ``fake=True``: the fake implementations' checks. ``a`` may be on any device (meta,
    or a FakeTensor's) and the tensors hold no memory to compare; every other check
    stands, every tensor on ``a``'s device included, so that a scale left on ``meta``
    beside CUDA operands is refused rather than faked.
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
    if not fake and device.type != "cuda":
        raise ValueError(f"a must be on a CUDA device, got {device}")
    named = [("b", b), ("a_scale", a_scale), ("b_scale", b_scale)]
    if out is not None:
        named.append(("out", out))
    for name, x in named:
        if x.device != device:
            raise ValueError(f"{name} must be on {device} like a, got {x.device}")
    # Addresses are not traced: under torch.compile the compiled op makes this check
    # when the graph runs.
    if out is not None and not fake and not torch.compiler.is_compiling():
        for name, x in (("a", a), ("b", b), ("a_scale", a_scale), ("b_scale", b_scale)):
            if shares_memory(out, x):
                raise ValueError(f"out must not share memory with {name} (their address "
                                 "ranges intersect)")
    return Problem(m, n, k)  # no int(): under torch.compile they may be symbolic


def check_fp8_operand(x: object, name: str) -> torch.Tensor:
    """A 2-D FP8 tensor on any device (the operand preparation's input)."""
    x = _require_tensor(x, name)
    _require_2d(x, name)
    _require_dtype(x, name, FP8_DTYPES)
    return x


# quantize_weight's launch grid holds at most 65535 blocks of 128 rows.
WEIGHT_ROWS = 65535 * BLOCK


def check_quantize_input(
    x: object, dtype: object, *, weight: bool = False, fake: bool = False
) -> torch.Tensor:
    """Validate a quantizer's input; ``fake=True`` (the fake implementations): any device.

    Otherwise CUDA or ``meta``: on ``meta`` the op's fake (its Meta kernel) gives the
    results' shapes, as an all-``meta`` call of the gemm entry points does.
    ``weight=True``: the 128x128 quantizer, which takes at most ``WEIGHT_ROWS`` rows.
    """
    x = _require_tensor(x, "x")
    _require_dtype(x, "x", (torch.float32, torch.bfloat16))
    _require_2d(x, "x")
    if weight and x.shape[0] > WEIGHT_ROWS:
        raise ValueError(
            f"x has {x.shape[0]} rows; quantize_weight takes at most {WEIGHT_ROWS} (65535 "
            "blocks of 128); fix: quantize it in parts of at most that many rows")
    if dtype not in FP8_DTYPES:
        raise TypeError(
            f"dtype must be torch.float8_e4m3fn or torch.float8_e4m3fnuz, got {dtype!r}")
    if not fake and x.device.type not in ("cuda", "meta"):
        raise ValueError(f"x must be on a CUDA device, got {x.device}")
    return x
