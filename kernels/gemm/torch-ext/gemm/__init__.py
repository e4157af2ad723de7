"""Block-scaled FP8 GEMM for NVIDIA Hopper (sm_90a).

``C[m, n] = sum_k A[m, k] B[k, n] a_scale[k // 128, m] b_scale[k // 128, n // 128]`` with
A, B in ``float8_e4m3fn`` (or ``float8_e4m3fnuz``), float32 scales (1x128 for A,
128x128 for B) and a bfloat16 result.

Two calling conventions, every operand in any memory layout (K-major, M/N-major,
transposed views) without copies by the caller:

- :func:`gemm` -- the guide's: ``a`` (M, K), ``b`` (K, N), ``a_scale`` (KB, M),
  ``b_scale`` (KB, NB). The challenge's storage is this call with ``a`` given as the
  transposed view of its (K, M) buffer; ``b`` (K, N) and both scales are passed as
  stored.
- :func:`gemm_nt` -- the model's (DeepGEMM / ``nn.Linear``): activations (M, K), weights
  (N, K), scales (M, KB) and (NB, KB).

``precision="fast"`` runs FP8 tensor cores (block scales promoted into FP32 once per
128 of K); ``precision="exact"`` converts the FP8 operands exactly to FP16 or BF16 (inside
the GEMM kernel, or in a pass before it) and runs 16-bit tensor cores, which passes the
challenge's elementwise checker. In fast mode ``float8_e4m3fnuz`` operands are re-encoded
as the ``float8_e4m3fn`` bytes of the same values in the operand pass (+-240 included);
only magnitudes below 2**-6 that are odd multiples of 2**-10 round to the even neighbour,
as ``x.float().to(torch.float8_e4m3fn)`` rounds them. Exact mode converts every value
exactly.

:func:`plan` and :func:`plan_nt` say which kernel a call would launch, without running
it (the ids are those of ``NOTES.md``'s kernel table).

Both functions are real PyTorch operators (``torch.library``) with fake
implementations: they trace under ``torch.compile(fullgraph=True)``, capture into CUDA
graphs, never synchronize with the host, and run on the current stream. The fake
implementations check the arguments as the compiled op does (shapes, dtypes, every
tensor on ``a``'s device): they are also the ops' ``meta`` kernels, which the dispatcher
runs whenever any argument is on ``meta``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from . import _validate, reference
from ._ops import add_op_namespace_prefix, ops

__all__ = [
    "gemm",
    "gemm_nt",
    "Plan",
    "plan",
    "plan_nt",
    "quantize_activation",
    "quantize_weight",
    "reference",
]


# The fakes are also the ops' Meta kernels: the dispatcher runs them, not the CUDA
# kernels and their checks, whenever any argument is on `meta` (a scale buffer left there
# by deferred initialization, say). So they check what the compiled op checks, devices
# included, and a mixed call raises instead of returning uninitialized memory.


@torch.library.register_fake(add_op_namespace_prefix("gemm_nt"))
def _gemm_nt_fake(a, b, a_scale, b_scale, exact=False, variant=-1, splits=-1, swizzle=0):
    m, n, _ = _validate.check_gemm(a, b, a_scale, b_scale, None, layout="nt", fake=True)
    return a.new_empty((m, n), dtype=torch.bfloat16)


@torch.library.register_fake(add_op_namespace_prefix("gemm_nt_out"))
def _gemm_nt_out_fake(out, a, b, a_scale, b_scale, exact=False, variant=-1, splits=-1,
                      swizzle=0):
    _validate.check_gemm(a, b, a_scale, b_scale, out, layout="nt", fake=True)
    return None


@torch.library.register_fake(add_op_namespace_prefix("gemm"))
def _gemm_fake(out, a, b, a_scale, b_scale):
    _validate.check_gemm(a, b, a_scale, b_scale, out, layout="kn", fake=True)
    return None


def _fp8_dtype(fnuz: bool) -> torch.dtype:
    return torch.float8_e4m3fnuz if fnuz else torch.float8_e4m3fn


@torch.library.register_fake(add_op_namespace_prefix("quantize_1x128"))
def _quantize_1x128_fake(x, fnuz=False):
    dtype = _fp8_dtype(fnuz)
    _validate.check_quantize_input(x, dtype, fake=True)
    kb = -(-x.shape[1] // 128)
    return x.new_empty(x.shape, dtype=dtype), x.new_empty((x.shape[0], kb), dtype=torch.float32)


@torch.library.register_fake(add_op_namespace_prefix("quantize_128x128"))
def _quantize_128x128_fake(x, fnuz=False):
    dtype = _fp8_dtype(fnuz)
    _validate.check_quantize_input(x, dtype, weight=True, fake=True)
    nb, kb = -(-x.shape[0] // 128), -(-x.shape[1] // 128)
    return x.new_empty(x.shape, dtype=dtype), x.new_empty((nb, kb), dtype=torch.float32)


@torch.library.register_fake(add_op_namespace_prefix("prepare_operand"))
def _prepare_operand_fake(x, to_bf16=False):
    _validate.check_fp8_operand(x, "x")
    kp = -(-x.shape[1] // 16) * 16
    return x.new_empty((x.shape[0], kp), dtype=torch.bfloat16 if to_bf16 else torch.float8_e4m3fn)


def _launch(a, b, a_scale, b_scale, out, exact: bool, layout: str) -> torch.Tensor:
    if layout == "kn":  # the guide's convention is the NT product of transposed views
        b, a_scale, b_scale = b.t(), a_scale.t(), b_scale.t()
    if out is None:
        return ops.gemm_nt(a, b, a_scale, b_scale, exact)
    ops.gemm_nt_out(out, a, b, a_scale, b_scale, exact)
    return out


def _run(a, b, a_scale, b_scale, out, precision: object, layout: str) -> torch.Tensor:
    exact = _validate.check_precision(precision) == "exact"
    if torch.compiler.is_compiling():  # checked once, while tracing
        _validate.check_gemm(a, b, a_scale, b_scale, out, layout=layout)
        return _launch(a, b, a_scale, b_scale, out, exact, layout)
    # The compiled op checks every argument itself before it launches anything, so valid
    # calls skip the Python checks (about 4 us per call). A failed call runs them to
    # raise their error instead: it names the argument in the caller's convention, and
    # covers what never reaches the compiled op (non-tensors, tensors off the GPU). A
    # call with any tensor on `meta` reaches the fake instead, which checks as the
    # compiled op does: all on `meta` it gives the result's shape, mixed it raises.
    try:
        return _launch(a, b, a_scale, b_scale, out, exact, layout)
    except Exception:
        try:
            _validate.check_gemm(a, b, a_scale, b_scale, out, layout=layout)
        except (TypeError, ValueError) as named:
            raise named from None
        raise


def gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    out: torch.Tensor | None = None,
    *,
    precision: str = "fast",
) -> torch.Tensor:
    """Block-scaled FP8 product in the guide's convention.

    Args:
        a: (M, K) float8_e4m3fn / float8_e4m3fnuz, any strides (the challenge's (K, M)
            storage passes as its transposed view).
        b: (K, N) FP8, any strides (the challenge's (K, N) storage passes as it is).
        a_scale: (ceil(K/128), M) float32, one scale per row of ``a`` per 128 of K.
        b_scale: (ceil(K/128), ceil(N/128)) float32, one per 128x128 tile of ``b``.
        out: optional (M, N) bfloat16 tensor to write, any layout whose elements do not
            overlap and that shares no memory with the inputs; allocated when None.
        precision: ``"fast"`` (FP8 tensor cores) or ``"exact"`` (16-bit tensor cores,
            BF16 or FP16, on exactly converted operands; passes the challenge's checker).

    Returns:
        ``out`` (or a new tensor): (M, N) bfloat16.

    Example:
        >>> c = gemm(a, b, a_scale, b_scale)                 # a (M,K), b (K,N)
        >>> c = gemm(a_km.T, b_kn, sa_kbm, sb_kbnb)          # the challenge's storage:
        >>> # a (K,M), b (K,N), scales (KB,M), (KB,NB); only a is passed as a view
    """
    return _run(a, b, a_scale, b_scale, out, precision, "kn")


def gemm_nt(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    out: torch.Tensor | None = None,
    *,
    precision: str = "fast",
) -> torch.Tensor:
    """Block-scaled FP8 product ``a @ b.T`` in the model's ("NT") convention.

    Args:
        a: (M, K) activations, FP8, any strides.
        b: (N, K) weights, FP8, any strides.
        a_scale: (M, ceil(K/128)) float32.
        b_scale: (ceil(N/128), ceil(K/128)) float32.
        out: optional (M, N) bfloat16 output (see :func:`gemm`).
        precision: ``"fast"`` or ``"exact"`` (see :func:`gemm`).

    Returns:
        (M, N) bfloat16.

    Example:
        >>> qa, sa = quantize_activation(x)          # x (M, K)
        >>> qw, sw = quantize_weight(w)              # w (N, K)
        >>> y = gemm_nt(qa, qw, sa, sw)              # ~ x @ w.T
    """
    return _run(a, b, a_scale, b_scale, out, precision, "nt")


class Plan(NamedTuple):
    """The kernel a call launches: its id, its K slices (split-K kernels; stream-K
    kernels: 0 heuristic, 1 data-parallel) and its name. ``variant`` is -1 (name
    ``"none"``) when M, N or K is zero and no kernel runs."""

    variant: int
    splits: int
    name: str


def _plan(a, b, a_scale, b_scale, precision: str, layout: str) -> Plan:
    _validate.check_precision(precision)
    _validate.check_gemm(a, b, a_scale, b_scale, None, layout=layout)
    if layout == "kn":  # the guide's convention, as gemm passes it on
        b, a_scale, b_scale = b.t(), a_scale.t(), b_scale.t()
    return Plan(*ops.plan_nt(a, b, a_scale, b_scale, precision == "exact"))


def plan(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    *,
    precision: str = "fast",
) -> Plan:
    """The kernel :func:`gemm` would launch for these arguments on their device.

    Nothing runs on the GPU; the arguments are checked as :func:`gemm` checks them.

    Example:
        >>> plan(a, b, a_scale, b_scale, precision="exact")
        Plan(variant=20, splits=0, name='fp8_coop_128x128_exact_amn')
    """
    return _plan(a, b, a_scale, b_scale, precision, "kn")


def plan_nt(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    *,
    precision: str = "fast",
) -> Plan:
    """The kernel :func:`gemm_nt` would launch for these arguments (see :func:`plan`)."""
    return _plan(a, b, a_scale, b_scale, precision, "nt")


def quantize_activation(
    x: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-1x128 quantization of a (M, K) float32/bfloat16 matrix.

    Returns ``(q, scale)``: q (M, K) in ``dtype``, scale (M, ceil(K/128)) float32 with
    ``x ~= q * scale`` per group; equal to :func:`reference.quantize_activation_reference`.
    """
    x = _validate.check_quantize_input(x, dtype)
    return ops.quantize_1x128(x, dtype == torch.float8_e4m3fnuz)


def quantize_weight(
    x: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-128x128 quantization of a (N, K) float32/bfloat16 matrix.

    Returns ``(q, scale)``: q (N, K) in ``dtype``, scale (ceil(N/128), ceil(K/128)).
    At most 65535 * 128 rows (the launch grid's limit; quantize more in parts).
    """
    x = _validate.check_quantize_input(x, dtype, weight=True)
    return ops.quantize_128x128(x, dtype == torch.float8_e4m3fnuz)
