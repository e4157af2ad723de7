"""The gemm kernel package's Python layer and its benchmark script, without a GPU.

The package (``kernels/gemm/torch-ext/gemm``) is imported as it ships, with a stand-in
for the ``_ops`` module that a build generates: the op schemas are read from
``torch_binding.cpp`` and defined in a namespace of this test, with no kernel for any
device, as the real extension has none off the GPU. What runs here is what runs in
Python on a GPU machine too: the entry points, the checks, and the fake implementations,
which torch also registers as the ops' Meta kernels. The kernels themselves are tested
on a GPU in ``tests/gpu``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import sys
import types
import uuid

import pytest
from kf_testutil import REPO

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

PACKAGE = REPO / "kernels" / "gemm" / "torch-ext" / "gemm"
BINDING = REPO / "kernels" / "gemm" / "torch-ext" / "torch_binding.cpp"
GEMM_API = REPO / "kernels" / "gemm" / "gemm" / "gemm_api.h"

FN = torch.float8_e4m3fn
BF16 = torch.bfloat16
M, N, K = 4, 200, 300  # KB = 3, NB = 2


def binding_schemas() -> list[str]:
    """The schemas ``torch_binding.cpp`` defines: each ``ops.def(...)``'s adjacent string
    literals joined."""
    calls = re.findall(r'ops\.def\(\s*((?:"[^"]*"\s*)+)\)', BINDING.read_text())
    return ["".join(re.findall(r'"([^"]*)"', call)) for call in calls]


@pytest.fixture(scope="module")
def gemm():
    """The package, imported with the stand-in ``_ops`` under a name of its own."""
    namespace = f"_kf_gemm_test_{uuid.uuid4().hex[:8]}"
    name = f"gemm_python_layer_{uuid.uuid4().hex[:8]}"
    lib = torch.library.Library(namespace, "DEF")
    for schema in binding_schemas():
        lib.define(schema)
    ops_module = types.ModuleType(f"{name}._ops")
    ops_module.ops = getattr(torch.ops, namespace)
    ops_module.add_op_namespace_prefix = lambda op: f"{namespace}::{op}"
    ops_module.library = lib  # kept alive: it holds the definitions
    sys.modules[ops_module.__name__] = ops_module
    spec = importlib.util.spec_from_file_location(
        name, PACKAGE / "__init__.py", submodule_search_locations=[str(PACKAGE)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module._ops = ops_module  # as the import of a built package leaves it
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        for key in [k for k in sys.modules if k == name or k.startswith(f"{name}.")]:
            del sys.modules[key]


def test_stand_in_defines_every_op_of_the_binding():
    names = sorted(schema.split("(")[0] for schema in binding_schemas())
    assert names == ["gemm", "gemm_nt", "gemm_nt_out", "plan_nt", "prepare_operand",
                     "quantize_128x128", "quantize_1x128"]


def nt(device="meta", **over):
    args = dict(
        a=torch.empty(M, K, dtype=FN, device=device),
        b=torch.empty(N, K, dtype=FN, device=device),
        a_scale=torch.empty(M, 3, device=device),
        b_scale=torch.empty(2, 3, device=device),
        out=None,
    )
    args.update(over)
    return args


def kn(device="meta", **over):
    args = dict(
        a=torch.empty(M, K, dtype=FN, device=device),
        b=torch.empty(K, N, dtype=FN, device=device),
        a_scale=torch.empty(3, M, device=device),
        b_scale=torch.empty(3, 2, device=device),
        out=None,
    )
    args.update(over)
    return args


def call(gemm, layout: str, args: dict):
    fn = gemm.gemm_nt if layout == "nt" else gemm.gemm
    return fn(args["a"], args["b"], args["a_scale"], args["b_scale"], args["out"])


# --- a tensor on meta beside real ones (the fake runs in place of the CUDA kernel) ---


@pytest.mark.parametrize("layout", ["nt", "kn"])
@pytest.mark.parametrize("name", ["b", "a_scale", "b_scale", "out"])
def test_meta_argument_beside_cuda_operands_raises_its_name(gemm, layout, name):
    # FakeTensorMode stands in for the GPU: `a` is a CUDA tensor, one argument is on
    # meta, as when a scale buffer stays there after deferred initialization. Before,
    # the fake returned an uninitialized (M, N) tensor and nothing was checked.
    with FakeTensorMode():
        args = (nt if layout == "nt" else kn)("cuda", out=torch.empty(M, N, dtype=BF16,
                                                                       device="cuda"))
        args[name] = torch.empty(args[name].shape, dtype=args[name].dtype, device="meta")
        match = rf"^{name} must be on cuda:0 like a, got meta$"
        with pytest.raises(ValueError, match=match) as info:
            call(gemm, layout, args)
    assert info.value.__suppress_context__ or info.value.__context__ is None


@pytest.mark.parametrize("name", ["b", "a_scale", "b_scale", "out"])
def test_meta_argument_beside_cpu_operands_raises(gemm, name):
    args = nt("cpu", out=torch.empty(M, N, dtype=BF16))
    args[name] = torch.empty(args[name].shape, dtype=args[name].dtype, device="meta")
    with pytest.raises(ValueError, match="a must be on a CUDA device, got cpu"):
        call(gemm, "nt", args)
    # The op called directly reaches the fake as well, which names the argument.
    with pytest.raises(ValueError, match=f"{name} must be on cpu like a, got meta"):
        gemm._ops.ops.gemm_nt_out(args["out"], args["a"], args["b"], args["a_scale"],
                                  args["b_scale"], False)


def test_a_on_meta_beside_cpu_operands_raises(gemm):
    args = nt("cpu", a=torch.empty(M, K, dtype=FN, device="meta"))
    with pytest.raises(ValueError, match="a must be on a CUDA device, got meta"):
        call(gemm, "nt", args)
    with pytest.raises(ValueError, match="b must be on meta like a, got cpu"):
        gemm._ops.ops.gemm_nt(args["a"], args["b"], args["a_scale"], args["b_scale"], False)


# --- every tensor on meta: the fake checks what the compiled op checks ---

BAD_META = [
    ("nt", "k-mismatch", dict(b=torch.empty(N, K + 7, dtype=FN, device="meta")), ValueError,
     r"b must have shape \(N, K\)"),
    ("nt", "a_scale-shape", dict(a_scale=torch.empty(1, 1, device="meta")), ValueError,
     r"a_scale must have shape \(4, 3\)"),
    ("nt", "b_scale-shape", dict(b_scale=torch.empty(9, 9, device="meta")), ValueError,
     r"b_scale must have shape \(2, 3\)"),
    ("nt", "a-dtype", dict(a=torch.empty(M, K, device="meta")), TypeError,
     "a must be float8_e4m3fn or float8_e4m3fnuz, got float32"),
    ("nt", "a_scale-dtype", dict(a_scale=torch.empty(M, 3, dtype=BF16, device="meta")),
     TypeError, "a_scale must be float32"),
    ("nt", "b-3d", dict(b=torch.empty(1, N, K, dtype=FN, device="meta")), ValueError,
     "b must be 2-D"),
    ("nt", "out-dtype", dict(out=torch.empty(M, N, dtype=torch.float16, device="meta")),
     TypeError, "out must be bfloat16"),
    ("nt", "out-shape", dict(out=torch.empty(1, 1, dtype=BF16, device="meta")), ValueError,
     r"out must have shape \(4, 200\)"),
    ("nt", "out-overlap",
     dict(out=torch.empty(2000, dtype=BF16, device="meta").as_strided((M, N), (8, 1))),
     ValueError, "out must not have overlapping elements"),
    ("kn", "k-mismatch", dict(b=torch.empty(K + 1, N, dtype=FN, device="meta")), ValueError,
     r"b must have shape \(K, N\)"),
    ("kn", "a_scale-nt-layout", dict(a_scale=torch.empty(M, 3, device="meta")), ValueError,
     r"a_scale must have shape \(3, 4\)"),
    ("kn", "out-shape", dict(out=torch.empty(N, M, dtype=BF16, device="meta")), ValueError,
     r"out must have shape \(4, 200\)"),
]


@pytest.mark.parametrize("layout,case,over,exc,match", BAD_META,
                         ids=[f"{c[0]}-{c[1]}" for c in BAD_META])
def test_all_meta_invalid_call_raises(gemm, layout, case, over, exc, match):
    args = (nt if layout == "nt" else kn)(**over)
    with pytest.raises(exc, match=match) as info:
        call(gemm, layout, args)
    # The caller's convention: the Python checks word the error, not the fake.
    assert info.value.__suppress_context__ or info.value.__context__ is None


@pytest.mark.parametrize("case", ["k-mismatch", "a_scale-shape", "a-dtype"])
def test_direct_op_call_on_meta_checks(gemm, case):
    over = {c[1]: c[2] for c in BAD_META if c[0] == "nt"}[case]
    args = nt(**over)
    with pytest.raises((TypeError, ValueError)):
        gemm._ops.ops.gemm_nt(args["a"], args["b"], args["a_scale"], args["b_scale"], False)


def test_all_meta_valid_calls_give_shapes(gemm):
    y = call(gemm, "nt", nt())
    assert (y.shape, y.dtype, y.device.type) == ((M, N), BF16, "meta")
    y = call(gemm, "kn", kn())
    assert (y.shape, y.dtype, y.device.type) == ((M, N), BF16, "meta")
    # The challenge's storage through the guide's convention: a as a transposed view.
    y = gemm.gemm(torch.empty(K, M, dtype=FN, device="meta").t(), kn()["b"],
                  kn()["a_scale"], kn()["b_scale"], precision="exact")
    assert y.shape == (M, N)
    for out in (torch.empty(N, M, dtype=BF16, device="meta").t(),  # transposed
                torch.empty(4 * 201 + 400, dtype=BF16, device="meta")
                .as_strided((M, N), (201, 2))):  # rows interleaved, no element shared
        assert call(gemm, "nt", nt(out=out)) is out
        assert call(gemm, "kn", kn(out=out)) is out
    y = gemm._ops.ops.gemm(torch.empty(M, N, dtype=BF16, device="meta"), *list(kn().values())[:4])
    assert y is None
    ops = gemm._ops.ops
    x = torch.empty(130, K, device="meta")
    q, s = ops.quantize_1x128(x, True)
    assert (q.shape, q.dtype, s.shape, s.dtype) == ((130, K), torch.float8_e4m3fnuz, (130, 3),
                                                    torch.float32)
    q, s = ops.quantize_128x128(x.to(BF16), False)
    assert (q.shape, q.dtype, s.shape) == ((130, K), FN, (2, 3))
    p = ops.prepare_operand(torch.empty(M, 200, dtype=FN, device="meta"), True)
    assert (p.shape, p.dtype) == ((M, 208), BF16)


def test_quantizers_on_meta_give_shapes(gemm):
    # As gemm / gemm_nt: an all-meta call reaches the op's fake (its Meta kernel) and
    # gives the results' shapes (deferred initialization). Before, the Python check
    # refused meta before the op was reached.
    x = torch.empty(130, K, device="meta")
    q, s = gemm.quantize_activation(x, torch.float8_e4m3fnuz)
    assert (q.shape, q.dtype, q.device.type) == ((130, K), torch.float8_e4m3fnuz, "meta")
    assert (s.shape, s.dtype, s.device.type) == ((130, 3), torch.float32, "meta")
    q, s = gemm.quantize_weight(x.to(BF16))
    assert (q.shape, q.dtype, s.shape, s.dtype) == ((130, K), FN, (2, 3), torch.float32)
    # Any other device off the GPU is still refused by name.
    with pytest.raises(ValueError, match="x must be on a CUDA device, got cpu"):
        gemm.quantize_activation(torch.zeros(2, 128))


def test_quantize_weight_beyond_its_grid_is_refused_on_meta(gemm):
    # The compiled op refuses more than 65535 blocks of 128 rows; its fake (the Meta
    # kernel, and what torch.compile traces) gave the results' shapes for them.
    rows = 65535 * 128 + 1
    x = torch.empty(rows, 1, device="meta")
    match = (f"^x has {rows} rows; quantize_weight takes at most {rows - 1} "
             r"\(65535 blocks of 128\); fix: quantize it in parts of at most that many rows$")
    with pytest.raises(ValueError, match=match):
        gemm.quantize_weight(x)
    with pytest.raises(ValueError, match=match):
        gemm._ops.ops.quantize_128x128(x, False)
    q, s = gemm.quantize_weight(x[:rows - 1])
    assert (q.shape, s.shape) == ((rows - 1, 1), (65535, 1))
    q, s = gemm.quantize_activation(x)  # one group per row: no such limit
    assert (q.shape, s.shape) == ((rows, 1), (rows, 1))


def test_quantizer_dtype_given_as_a_string_is_quoted(gemm):
    # A string read "got float8_e4m3fnuz", as if that dtype itself were refused.
    x = torch.empty(2, 128, device="meta")
    with pytest.raises(TypeError, match=r"or torch\.float8_e4m3fnuz, got 'float8_e4m3fnuz'$"):
        gemm.quantize_activation(x, "float8_e4m3fnuz")
    with pytest.raises(TypeError, match=r", got torch\.float8_e5m2$"):
        gemm.quantize_weight(x, torch.float8_e5m2)


SPARSE = [torch.sparse_coo, torch.sparse_csr]


@pytest.mark.parametrize("layout", SPARSE, ids=["coo", "csr"])
@pytest.mark.parametrize("name", ["a_scale", "b_scale", "out"])
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_sparse_arguments_are_refused_by_name(gemm, layout, name):
    # Before, a sparse COO out read "out must not have overlapping elements, got strides
    # (0, 0)", a CSR one raised torch's "Sparse CSR tensors do not have strides", and a
    # sparse scale passed every check, so on a GPU the dispatcher's "Could not run ...
    # with arguments from the 'SparseCUDA' backend" reached the caller.
    match = (rf"^{name} must be a dense \(strided\) tensor, got {layout}; "
             rf"fix: pass {name}\.to_dense\(\)$")
    for convention, make in (("nt", nt), ("kn", kn)):
        args = make("cpu", out=torch.zeros(M, N, dtype=BF16))
        args[name] = args[name].to_sparse(layout=layout)
        with pytest.raises(TypeError, match=match):
            call(gemm, convention, args)


@pytest.mark.parametrize("layout", SPARSE, ids=["coo", "csr"])
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_sparse_quantizer_input_is_refused_by_name(gemm, layout):
    x = torch.zeros(4, 300).to_sparse(layout=layout)
    match = rf"^x must be a dense \(strided\) tensor, got {layout}; fix: pass x\.to_dense\(\)$"
    for quantize in (gemm.quantize_activation, gemm.quantize_weight):
        with pytest.raises(TypeError, match=match):
            quantize(x)


def test_fakes_of_the_other_ops_check_their_input(gemm):
    ops = gemm._ops.ops
    with pytest.raises(TypeError, match="x must be float32 or bfloat16, got float16"):
        ops.quantize_1x128(torch.empty(2, 128, dtype=torch.float16, device="meta"), False)
    with pytest.raises(ValueError, match="x must be 2-D"):
        ops.quantize_128x128(torch.empty(128, device="meta"), False)
    with pytest.raises(TypeError, match="x must be float8_e4m3fn or float8_e4m3fnuz"):
        ops.prepare_operand(torch.empty(2, 16, dtype=BF16, device="meta"), False)


def test_fakes_trace_with_symbolic_shapes(gemm):
    # What torch.compile's tracing hands the fakes: symbolic sizes and strides.
    def nt_call(a, b, sa, sb):
        return gemm.gemm_nt(a, b, sa, sb)

    def kn_out_call(a, b, sa, sb, out):
        return gemm.gemm(a, b, sa, sb, out)

    args = nt()
    graph = make_fx(nt_call, tracing_mode="symbolic")(args["a"], args["b"], args["a_scale"],
                                                     args["b_scale"])
    assert "gemm_nt.default" in graph.code
    args = kn()
    out = torch.empty(4 * 201 + 400, dtype=BF16, device="meta").as_strided((M, N), (201, 2))
    graph = make_fx(kn_out_call, tracing_mode="symbolic")(
        args["a"], args["b"], args["a_scale"], args["b_scale"], out)
    assert "gemm_nt_out.default" in graph.code
    bad = torch.empty(2000, dtype=BF16, device="meta").as_strided((M, N), (8, 1))
    with pytest.raises(ValueError, match="out must not have overlapping elements"):
        make_fx(kn_out_call, tracing_mode="symbolic")(
            args["a"], args["b"], args["a_scale"], args["b_scale"], bad)


def test_bad_input_under_torch_compile_names_the_argument(gemm):
    # As the README says: without fullgraph the checks' own error reaches the caller;
    # with fullgraph=True torch raises its Unsupported error, which quotes it.
    args = nt("cpu")
    args["a_scale"] = args["a_scale"].t()
    message = r"a_scale must have shape \(4, 3\) \(M, ceil\(K/128\)\), got \(3, 4\)"

    def f(a, b, a_scale, b_scale):
        return gemm.gemm_nt(a, b, a_scale, b_scale)

    torch._dynamo.reset()
    with pytest.raises(ValueError, match=f"^{message}$"):
        torch.compile(f, backend="eager")(args["a"], args["b"], args["a_scale"],
                                          args["b_scale"])
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported, match=message):
        torch.compile(f, backend="eager", fullgraph=True)(args["a"], args["b"],
                                                          args["a_scale"], args["b_scale"])
    torch._dynamo.reset()


# --- the benchmark script ---


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("gemm_benchmark_layer",
                                                  REPO / "benchmarks" / "gemm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_floor_counts_the_b_scale_tiles(bench):
    # Bandwidth-bound: 1 x 256 x 128 reads A (128 B), B (32768 B), writes C (512 B) and
    # reads 1 A scale and NB = 2 B scales (12 B). The count was one B scale too many
    # whenever 128 divides N.
    nbytes = 128 + 256 * 128 + 2 * 256 + 4 * (1 + 2) * 1
    assert bench.floor_us(1, 256, 128, "H100") == pytest.approx(nbytes / (3.35 * 1e6), rel=1e-12)
    nbytes = 128 + 200 * 128 + 2 * 200 + 4 * (1 + 2) * 1
    assert bench.floor_us(1, 200, 128, "H200") == pytest.approx(nbytes / (4.8 * 1e6), rel=1e-12)


def _row(**over):
    row = {"m": 64, "n": 2112, "k": 7168, "layout": "NT (K-major)",
           "calc_diff_vs_cublas": 3e-7, "exact_mismatches": 0}
    row.update(over)
    return row


@pytest.mark.parametrize("over,words", [
    (dict(calc_diff_vs_cublas=2e-5), "fast output's calc_diff against cuBLASLt is 2e-05"),
    (dict(calc_diff_vs_cublas=float("nan")), "fast output's calc_diff against cuBLASLt is nan"),
    (dict(calc_diff_kmajor_vs_cublas=1e-5), "fast, K-major operands output's calc_diff"),
    (dict(exact_mismatches=3), "exact mode fails the challenge's checker on 3 of 135168"),
])
def test_contract_failures_name_the_shape_and_the_miss(bench, over, words):
    failures = bench.contract_failures(_row(**over))
    assert len(failures) == 1
    assert failures[0].startswith("64x2112x7168 NT (K-major): ")
    assert words in failures[0]


def test_contract_holds(bench):
    assert bench.contract_failures(_row(calc_diff_kmajor_vs_cublas=9.9e-6)) == []


def test_benchmark_fails_loudly_on_a_wrong_output(bench, monkeypatch, tmp_path, capsys):
    def wrong(*args, **kwargs):
        raise bench.ContractError("64x2112x7168 NT (K-major): exact mode fails ...")

    monkeypatch.setattr(bench, "load_kernel", lambda: types.SimpleNamespace())
    build = {"path": "/hub/gemm", "GEMM_KERNEL_REPO": "kernels-community/gemm",
             "metadata": "none (not a kernelforge build)", "extension_sha256": {}}
    monkeypatch.setattr(bench, "env_info", lambda gk=None: {"kernel": build})
    monkeypatch.setattr(bench.torch.cuda, "get_device_name", lambda: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(bench, "run_shape", wrong)
    monkeypatch.setattr(sys, "argv", ["gemm.py", "--suite", "deepseek", "--out", str(tmp_path)])
    assert bench.main() == 1
    err = capsys.readouterr().err
    assert "FAILED, the kernel's output is wrong: 64x2112x7168 NT (K-major)" in err
    assert not list(tmp_path.iterdir()), "a report was written for a wrong kernel"


def test_sweep_covers_every_kernel_variant(bench):
    text = GEMM_API.read_text()
    count = int(re.search(r"^\s*kCount = (\d+),", text, flags=re.M).group(1))
    for k in (256, 7168):
        configs = bench.sweep_configs(k)
        assert {v for _, v, _, _ in configs} == set(range(count))
    # Each in the mode it runs: 16-bit tensor cores for the exact ids.
    exact = {v for e, v, _, _ in bench.sweep_configs(7168) if e}
    assert exact == {3, 4, 8, 9, 17, 19, 20, 21, 22, 23}


def test_kernel_build_is_recorded(bench, tmp_path, monkeypatch):
    variant = tmp_path / "torch211-cxx11-cu130-x86_64-linux"
    variant.mkdir()
    (variant / "__init__.py").write_text("")
    (variant / "_gemm_cuda_abc.so").write_bytes(b"\x7fELF extension")
    (variant / "metadata.json").write_text(json.dumps({
        "id": "_gemm_cuda_abc", "version": 1,
        "provenance": {"kernel": {"commit": "449af4e", "dirty": False},
                       "source-sha256": "c2hh"}}))
    module = types.SimpleNamespace(__name__="_gemm_cuda_abc", __file__=str(variant / "__init__.py"))
    monkeypatch.delenv("GEMM_KERNEL_PATH", raising=False)
    monkeypatch.setenv("GEMM_KERNEL_REPO", "kernels-community/gemm")
    info = bench.kernel_build(module)
    assert info["GEMM_KERNEL_REPO"] == "kernels-community/gemm"
    assert (info["variant"], info["id"], info["version"]) == (variant.name, "_gemm_cuda_abc", 1)
    assert info["source"] == {"commit": "449af4e", "dirty": False}
    assert info["source_sha256"] == "c2hh"
    digest = hashlib.sha256(b"\x7fELF extension").hexdigest()
    assert info["extension_sha256"] == {"_gemm_cuda_abc.so": digest}
    line = bench.kernel_line(info)
    assert "source commit 449af4e" in line and digest in line

    dev = tmp_path / "dev" / "gemm"  # a development build: no metadata
    dev.mkdir(parents=True)
    (dev / "__init__.py").write_text("")
    monkeypatch.setenv("GEMM_KERNEL_PATH", str(dev.parent))
    info = bench.kernel_build(types.SimpleNamespace(__name__="gemm",
                                                    __file__=str(dev / "__init__.py")))
    assert info["GEMM_KERNEL_PATH"] == str(dev.parent)
    assert info["metadata"] == "none (not a kernelforge build)"
    assert "not a kernelforge build" in bench.kernel_line(info)
