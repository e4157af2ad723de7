"""Bad input to the gemm entry points raises an exception naming the argument.

The checks live in the kernel package's ``_validate.py``, which needs no GPU: this
table runs everywhere on CPU tensors. The GPU half (device mismatches, the compiled
op called directly) is in ``test_gemm.py``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import importlib.util  # noqa: E402
from pathlib import Path  # noqa: E402

_VALIDATE = Path(__file__).resolve().parents[2] / "kernels" / "gemm" / "torch-ext" / "gemm" / "_validate.py"
_spec = importlib.util.spec_from_file_location("gemm_validate", _VALIDATE)
validate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(validate)

FN = torch.float8_e4m3fn
M, N, K = 4, 200, 300  # KB = 3, NB = 2


def nt_args(**over):
    args = dict(
        a=torch.zeros(M, K, dtype=FN),
        b=torch.zeros(N, K, dtype=FN),
        a_scale=torch.ones(M, 3),
        b_scale=torch.ones(2, 3),
        out=None,
    )
    args.update(over)
    return args


def kn_args(**over):
    args = dict(
        a=torch.zeros(M, K, dtype=FN),
        b=torch.zeros(K, N, dtype=FN),
        a_scale=torch.ones(3, M),
        b_scale=torch.ones(3, 2),
        out=None,
    )
    args.update(over)
    return args


BAD_NT = [
    ("a-not-tensor", dict(a=[[1.0]]), TypeError, "a must be a torch.Tensor"),
    ("a-dtype", dict(a=torch.zeros(M, K)), TypeError, "a must be float8_e4m3fn"),
    ("b-dtype", dict(b=torch.zeros(N, K, dtype=torch.bfloat16)), TypeError, "b must be float8"),
    ("a_scale-dtype", dict(a_scale=torch.ones(M, 3, dtype=torch.float64)), TypeError, "a_scale must be float32"),
    ("b_scale-dtype", dict(b_scale=torch.ones(2, 3, dtype=torch.bfloat16)), TypeError, "b_scale must be float32"),
    ("out-dtype", dict(out=torch.empty(M, N)), TypeError, "out must be bfloat16"),
    ("a-1d", dict(a=torch.zeros(K, dtype=FN)), ValueError, "a must be 2-D"),
    ("b-3d", dict(b=torch.zeros(1, N, K, dtype=FN)), ValueError, "b must be 2-D"),
    ("k-mismatch", dict(b=torch.zeros(N, K + 1, dtype=FN)), ValueError, r"b must have shape \(N, K\)"),
    ("a_scale-shape", dict(a_scale=torch.ones(3, M)), ValueError, r"a_scale must have shape \(4, 3\)"),
    ("a_scale-short", dict(a_scale=torch.ones(M, 2)), ValueError, "a_scale must have shape"),
    ("b_scale-shape", dict(b_scale=torch.ones(3, 2)), ValueError, r"b_scale must have shape \(2, 3\)"),
    ("b_scale-per-column", dict(b_scale=torch.ones(N, 3)), ValueError, "b_scale must have shape"),
    ("out-shape", dict(out=torch.empty(N, M, dtype=torch.bfloat16)), ValueError, r"out must have shape \(4, 200\)"),
    ("out-overlap", dict(out=torch.empty(1, N, dtype=torch.bfloat16).expand(M, N)), ValueError, "out must not have overlapping"),
    ("cpu", dict(), ValueError, "a must be on a CUDA device"),
]

BAD_KN = [
    ("k-mismatch", dict(b=torch.zeros(K + 1, N, dtype=FN)), ValueError, r"b must have shape \(K, N\)"),
    ("a_scale-nt-layout", dict(a_scale=torch.ones(M, 3)), ValueError, r"a_scale must have shape \(3, 4\)"),
    ("b_scale-nt-layout", dict(b_scale=torch.ones(2, 3)), ValueError, r"b_scale must have shape \(3, 2\)"),
    ("cpu", dict(), ValueError, "a must be on a CUDA device"),
]


@pytest.mark.parametrize("case,over,exc,match", BAD_NT, ids=[c[0] for c in BAD_NT])
def test_bad_input_nt(case, over, exc, match):
    with pytest.raises(exc, match=match):
        validate.check_gemm(**nt_args(**over), layout="nt")


@pytest.mark.parametrize("case,over,exc,match", BAD_KN, ids=[c[0] for c in BAD_KN])
def test_bad_input_kn(case, over, exc, match):
    with pytest.raises(exc, match=match):
        validate.check_gemm(**kn_args(**over), layout="kn")


@pytest.mark.parametrize("precision", ["fastest", None, 1, "FAST"])
def test_bad_precision(precision):
    with pytest.raises(ValueError, match="precision must be one of"):
        validate.check_precision(precision)


def test_transposed_views_pass_shape_checks():
    # The challenge's storage: a (K, M), b (K, N), scales (KB, M), (KB, NB); handed over
    # as transposed views in the NT convention. Only the device check may fail on CPU.
    a_s, b_s = torch.zeros(K, M, dtype=FN), torch.zeros(K, N, dtype=FN)
    sa_s, sb_s = torch.ones(3, M), torch.ones(3, 2)
    with pytest.raises(ValueError, match="a must be on a CUDA device"):
        validate.check_gemm(a_s.t(), b_s.t(), sa_s.t(), sb_s.t(), None, layout="nt")


@pytest.mark.parametrize(
    "shape,stride,overlap",
    [
        ((4, 5), (5, 1), False),
        ((4, 5), (1, 4), False),
        ((4, 5), (8, 1), False),
        ((4, 5), (4, 1), True),
        ((4, 5), (0, 1), True),
        ((1, 5), (0, 1), False),
        ((4, 1), (1, 0), False),
        ((1, 5), (7, 0), True),
    ],
)
def test_has_overlap(shape, stride, overlap):
    x = torch.empty(64, dtype=torch.bfloat16).as_strided(shape, stride)
    assert validate.has_overlap(x) is overlap


@pytest.mark.parametrize(
    "x,dtype,exc,match",
    [
        ("list", torch.float8_e4m3fn, TypeError, "x must be a torch.Tensor"),
        ("f16", torch.float8_e4m3fn, TypeError, "x must be float32 or bfloat16"),
        ("1d", torch.float8_e4m3fn, ValueError, "x must be 2-D"),
        ("ok", torch.float16, TypeError, "dtype must be"),
        ("ok", torch.float8_e4m3fn, ValueError, "x must be on a CUDA device"),
    ],
)
def test_bad_quantize_input(x, dtype, exc, match):
    xs = {
        "list": [[1.0]],
        "f16": torch.zeros(2, 2, dtype=torch.float16),
        "1d": torch.zeros(4),
        "ok": torch.zeros(2, 130),
    }[x]
    with pytest.raises(exc, match=match):
        validate.check_quantize_input(xs, dtype)


# The entry points skip these checks on valid calls and run them when the compiled op
# rejects a call (kernel package, ``_run``): the error a caller sees must be the same.


def _to_gpu(x: torch.Tensor) -> torch.Tensor:
    y = x.cuda()  # dense: an expanded view comes back contiguous
    return y if y.stride() == x.stride() else y.as_strided(x.shape, x.stride())


def _on_gpu(args: dict) -> dict:
    return {k: _to_gpu(v) if isinstance(v, torch.Tensor) else v for k, v in args.items()}


def _call(gemm_kernel, layout: str, args: dict):
    fn = gemm_kernel.gemm_nt if layout == "nt" else gemm_kernel.gemm
    return fn(args["a"], args["b"], args["a_scale"], args["b_scale"], args["out"])


GPU_CASES = [("nt", *c) for c in BAD_NT] + [("kn", *c) for c in BAD_KN]


@pytest.mark.cuda
@pytest.mark.sm90
@pytest.mark.parametrize(
    "layout,case,over,exc,match", GPU_CASES, ids=[f"{c[0]}-{c[1]}" for c in GPU_CASES]
)
def test_entry_points_raise_the_checks_errors(gemm_kernel, layout, case, over, exc, match):
    args = (nt_args if layout == "nt" else kn_args)(**over)
    if case != "cpu":  # everything on the GPU: the compiled op sees the call first
        args = _on_gpu(args)
    with pytest.raises(exc, match=match) as info:
        _call(gemm_kernel, layout, args)
    # The compiled op's own message is not chained onto the one the checks raise.
    assert info.value.__suppress_context__ or info.value.__context__ is None


@pytest.mark.cuda
@pytest.mark.sm90
def test_compiled_op_rejects_overlapping_strided_out(gemm_kernel):
    # Rows 8 elements apart, 200 wide: no zero stride, but rows overlap. The compiled op
    # decides this itself, as the Python check does, since valid-looking calls skip that.
    args = _on_gpu(nt_args())
    out = torch.empty(1000, dtype=torch.bfloat16, device="cuda").as_strided((M, N), (8, 1))
    with pytest.raises(ValueError, match="out must not have overlapping elements"):
        gemm_kernel._ops.ops.gemm_nt_out(out, args["a"], args["b"], args["a_scale"],
                                         args["b_scale"], False)
    with pytest.raises(ValueError, match="out must not have overlapping elements"):
        gemm_kernel.gemm_nt(args["a"], args["b"], args["a_scale"], args["b_scale"], out)


@pytest.mark.cuda
@pytest.mark.sm90
def test_valid_call_after_errors_computes(gemm_kernel):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, K, generator=g, device="cuda")
    w = torch.randn(N, K, generator=g, device="cuda")
    qa, sa = gemm_kernel.quantize_activation(x)
    qw, sw = gemm_kernel.quantize_weight(w)
    for layout in ("nt", "kn"):
        with pytest.raises(ValueError):
            _call(gemm_kernel, layout, _on_gpu((nt_args if layout == "nt" else kn_args)(
                a_scale=torch.ones(7, 7))))
    y = gemm_kernel.gemm_nt(qa, qw, sa, sw)
    y_kn = gemm_kernel.gemm(qa, qw.t(), sa.t(), sw.t())
    ref = gemm_kernel.reference.gemm_nt_reference(qa, qw, sa, sw)
    assert gemm_kernel.reference.calc_diff(y, ref) < 1e-5
    assert torch.equal(y, y_kn)
