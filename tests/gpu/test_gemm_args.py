"""Bad input to the gemm entry points raises an exception naming the argument.

The checks live in the kernel package's ``_validate.py``, which needs no GPU: this
table runs everywhere on CPU tensors. The GPU half (device mismatches, the compiled
op called directly) is in ``test_gemm.py``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import importlib.util  # noqa: E402
import itertools  # noqa: E402
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
        ((2, 3), (3, 2), False),  # rows interleave, every element has its own address
        ((2, 2), (2, 3), False),
        ((2, 2), (1, 1), True),
        ((4, 3), (2, 3), True),  # (3, 0) and (0, 2) meet at 6
        ((3, 3), (2, 3), False),  # one row fewer: they do not
        ((0, 2), (1, 0), False),  # empty: nothing to overlap
        ((2, 0), (0, 0), False),
    ],
)
def test_has_overlap(shape, stride, overlap):
    x = torch.empty(64, dtype=torch.bfloat16).as_strided(shape, stride)
    assert validate.has_overlap(x) is overlap


def _overlaps_by_enumeration(shape, stride) -> bool:
    offsets = [i * stride[0] + j * stride[1] for i in range(shape[0]) for j in range(shape[1])]
    return len(set(offsets)) != len(offsets)


def test_has_overlap_is_exact():
    # Every layout of up to 6 x 6 elements with strides below 13, zero sizes and zero
    # strides included, against the addresses themselves: no false positive (a legal out
    # refused), no false negative (an overlapping out written).
    storage = torch.empty(128, dtype=torch.bfloat16)
    wrong = []
    for r, c, sr, sc in itertools.product(range(7), range(7), range(13), range(13)):
        x = storage.as_strided((r, c), (sr, sc))
        if validate.has_overlap(x) != _overlaps_by_enumeration((r, c), (sr, sc)):
            wrong.append(((r, c), (sr, sc)))
    assert not wrong, f"{len(wrong)} layouts decided wrongly, e.g. {wrong[:5]}"


def test_interleaved_out_passes_the_checks():
    # Rows 201 elements apart, elements 2 apart: row i spans [201 i, 201 i + 398], so rows
    # interleave, but no two elements meet. Only the device check may fail on CPU.
    out = torch.empty(4 * 201 + 400, dtype=torch.bfloat16).as_strided((M, N), (201, 2))
    with pytest.raises(ValueError, match="a must be on a CUDA device"):
        validate.check_gemm(**nt_args(out=out), layout="nt")


def test_shares_memory():
    buf = torch.zeros(1024, dtype=torch.uint8)
    a = buf[:600].view(FN).view(4, 150)  # bytes [0, 600)
    out = buf[598:598 + 200].view(torch.bfloat16).view(4, 25)  # bytes [598, 798)
    assert validate.shares_memory(out, a) and validate.shares_memory(a, out)
    adjacent = buf[600:800].view(torch.bfloat16).view(4, 25)  # bytes [600, 800)
    assert not validate.shares_memory(adjacent, a)
    # The last element's bytes count: a bf16 element at byte 598 covers 598 and 599.
    last = buf[:600].view(torch.bfloat16)[-1:]
    assert validate.shares_memory(last.view(1, 1), a)
    # A transposed view spans the same bytes as its base.
    assert validate.shares_memory(out.t(), buf[700:702])
    # Conservative: interleaved views with no common byte still count as sharing.
    evens = buf.view(torch.bfloat16)[0:40:2].view(4, 5)
    odds = buf.view(torch.bfloat16)[1:40:2].view(4, 5)
    assert validate.shares_memory(evens, odds)
    # Empty tensors, separate allocations and meta tensors share nothing.
    assert not validate.shares_memory(buf[5:5].view(1, 0), a)
    assert not validate.shares_memory(torch.zeros(4, 150, dtype=FN), a)
    meta = torch.empty(4, 25, dtype=torch.bfloat16, device="meta")
    assert not validate.shares_memory(meta, meta)


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
@pytest.mark.parametrize("case,over,exc,match", [c for c in BAD_KN if c[0] != "cpu"],
                         ids=[c[0] for c in BAD_KN if c[0] != "cpu"])
def test_the_compiled_guide_op_words_shapes_in_its_convention(gemm_kernel, case, over, exc,
                                                              match):
    """The compiled guide-convention op, called directly, checks the transposes it
    multiplies; a shape it refuses is still worded as the caller passed it."""
    args = _on_gpu(kn_args(**over))
    out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(exc, match=match):
        gemm_kernel._ops.ops.gemm(out, args["a"], args["b"], args["a_scale"], args["b_scale"])


@pytest.mark.cuda
@pytest.mark.sm90
def test_quantize_weight_beyond_its_grid_names_the_rows(gemm_kernel):
    rows = 65535 * 128 + 1
    x = torch.zeros(rows, 1, device="cuda")
    with pytest.raises(ValueError, match=f"x has {rows} rows; quantize_weight takes at most "
                                         f"{rows - 1}.*fix: quantize it in parts"):
        gemm_kernel.quantize_weight(x)
    q, s = gemm_kernel.quantize_weight(x[:rows - 1])
    assert q.shape == (rows - 1, 1) and s.shape == (65535, 1)
    assert not q.float().any() and not s.isnan().any()


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
@pytest.mark.parametrize("name", ["b", "a_scale", "b_scale", "out"])
def test_an_argument_on_meta_is_refused(gemm_kernel, name):
    # Any tensor on `meta` sends the op to its fake (the Meta kernel), not to the CUDA
    # kernel's checks: the fake must refuse the mixed call, not return uninitialized
    # memory (a scale buffer left on meta by deferred initialization, say).
    args = _on_gpu(nt_args(out=torch.empty(M, N, dtype=torch.bfloat16)))
    args[name] = torch.empty_like(args[name], device="meta")
    match = rf"{name} must be on cuda:\d+ like a, got meta"
    with pytest.raises(ValueError, match=match) as info:
        _call(gemm_kernel, "nt", args)
    assert info.value.__suppress_context__ or info.value.__context__ is None
    kn = {"a": args["a"], "b": args["b"].t(), "a_scale": args["a_scale"].t(),
          "b_scale": args["b_scale"].t(), "out": args["out"]}
    with pytest.raises(ValueError, match=match):
        _call(gemm_kernel, "kn", kn)
    ops = gemm_kernel._ops.ops
    with pytest.raises(ValueError, match=match):
        ops.gemm_nt_out(args["out"], args["a"], args["b"], args["a_scale"], args["b_scale"], False)
    if name != "out":
        with pytest.raises(ValueError, match=match):
            ops.gemm_nt(args["a"], args["b"], args["a_scale"], args["b_scale"], False)


@pytest.mark.cuda
@pytest.mark.sm90
def test_a_on_meta_is_refused(gemm_kernel):
    args = _on_gpu(nt_args())
    args["a"] = torch.empty_like(args["a"], device="meta")
    with pytest.raises(ValueError, match="a must be on a CUDA device, got meta"):
        _call(gemm_kernel, "nt", args)
    with pytest.raises(ValueError, match=r"b must be on meta like a, got cuda"):
        gemm_kernel._ops.ops.gemm_nt(args["a"], args["b"], args["a_scale"], args["b_scale"], False)


def _sharing(x: torch.Tensor, shift: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A copy of ``x`` and an (M, N) bfloat16 ``out`` in one buffer, out starting
    ``shift`` bytes before the copy's end (0: right after it, no byte shared)."""
    nbytes = x.numel() * x.element_size()
    buf = torch.zeros(nbytes + 2 * M * N, dtype=torch.uint8, device="cuda")
    copy = buf[:nbytes].view(x.dtype).view(x.shape)
    copy.copy_(x)
    start = nbytes - shift
    out = buf[start:start + 2 * M * N].view(torch.bfloat16).view(M, N)
    return copy, out


@pytest.mark.cuda
@pytest.mark.sm90
@pytest.mark.parametrize("name", ["a", "b", "a_scale", "b_scale"])
def test_out_sharing_memory_with_an_input_is_refused(gemm_kernel, name):
    # The kernels would read the input while they write out: refused, by the compiled
    # op (called directly) and through the Python functions, even for one shared
    # element (out's first, the input's last two bytes).
    args = _on_gpu(nt_args())
    args[name], args["out"] = _sharing(args[name], shift=2)
    match = f"out must not share memory with {name}"
    with pytest.raises(ValueError, match=match) as info:
        _call(gemm_kernel, "nt", args)
    assert info.value.__suppress_context__ or info.value.__context__ is None
    with pytest.raises(ValueError, match=match):
        gemm_kernel._ops.ops.gemm_nt_out(args["out"], args["a"], args["b"], args["a_scale"],
                                         args["b_scale"], False)
    if name == "a":  # the guide's convention names the same tensor a
        with pytest.raises(ValueError, match=match):
            gemm_kernel.gemm(args["a"], args["b"].t(), args["a_scale"].t(),
                             args["b_scale"].t(), args["out"])
    # Right after the input, sharing no byte: accepted, and computed (zero operands).
    args[name], args["out"] = _sharing(args[name], shift=0)
    args["out"].fill_(1.0)
    assert _call(gemm_kernel, "nt", args) is args["out"]
    assert torch.equal(args["out"], torch.zeros_like(args["out"]))


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


@pytest.mark.cuda
@pytest.mark.sm90
def test_no_autograd_formula_as_the_readme_says(gemm_kernel):
    """A scale that requires grad: the result requires grad, and backward computes
    nothing for it, with torch's warning (README: the ops are for inference)."""
    args = _on_gpu(nt_args())
    scale = args["a_scale"].clone().requires_grad_()
    y = gemm_kernel.gemm_nt(args["a"], args["b"], scale, args["b_scale"])
    assert y.requires_grad
    with pytest.warns(UserWarning, match="autograd kernel was not registered"):
        y.float().sum().backward()
    assert scale.grad is None
