"""The GEMM benchmark's correctness checks (benchmarks/gemm.py), without a GPU: a shape
runs on CPU tensors through a stand-in for the kernel and for cuBLASLt, and every output
that gets timed must first have been checked, so that a wrong or unwritten result is
never timed.

torch's caching allocator hands a freed block back, contents and all, to the next
request of its size; the stand-in's allocator does the same, so an output the kernel
leaves unwritten shows whatever the last freed output of that shape held."""

from __future__ import annotations

import importlib.util
import math
import weakref

import pytest
from kf_testutil import REPO

torch = pytest.importorskip("torch")


def load(name: str, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench_module():
    return load("gemm_benchmark_checks", REPO / "benchmarks" / "gemm.py")


@pytest.fixture(scope="module")
def reference():
    return load("gemm_reference", REPO / "kernels" / "gemm" / "torch-ext" / "gemm" / "reference.py")


class Allocator:
    """Freed outputs go back to a pool and are handed out again, contents and all, to
    the next request of the same shape; a request the pool cannot serve gets NaN."""

    def __init__(self) -> None:
        self.free: list = []

    def empty(self, m: int, n: int):
        for i, block in enumerate(self.free):
            if tuple(block.shape) == (m, n):
                del self.free[i]
                break
        else:
            block = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
        out = block.view(m, n)
        weakref.finalize(out, self.free.append, block)
        return out


class FakeOps:
    def __init__(self, kernel) -> None:
        self.kernel = kernel

    def _write(self, out, a, b, sa, sb, variant):
        if variant in self.kernel.unwritten_variants:
            return
        product = self.kernel.product(a, b, sa, sb)
        if variant in self.kernel.wrong_variants:
            product = -product
        out.copy_(product)

    def gemm_nt(self, a, b, sa, sb, exact=False, variant=-1, splits=-1, swizzle=0):
        out = self.kernel.alloc.empty(a.shape[0], b.shape[0])
        self._write(out, a, b, sa, sb, variant)
        return out

    def gemm_nt_out(self, out, a, b, sa, sb, exact=False, variant=-1, splits=-1, swizzle=0):
        self._write(out, a, b, sa, sb, variant)

    def prepare_operand(self, x, to_bf16=False):
        return x.contiguous()


class FakeKernel:
    """The op's stand-in: the product in bf16, except on the paths named in `unwritten`
    ("fast": A MN-major, "kmajor": A K-major, "exact"), whose output it leaves as the
    allocator handed it over."""

    def __init__(self, reference, unwritten=(), wrong_variants=(), unwritten_variants=()):
        self.reference = reference
        self.alloc = Allocator()
        self.unwritten = set(unwritten)
        self.wrong_variants = set(wrong_variants)
        self.unwritten_variants = set(unwritten_variants)
        self._ops = type("Ops", (), {"ops": FakeOps(self)})()

    def product(self, a, b, sa, sb):
        return self.reference.gemm_nt_reference(a, b, sa, sb).to(torch.bfloat16)

    def gemm_nt(self, a, b, sa, sb, out=None, *, precision="fast"):
        path = "exact" if precision == "exact" else ("kmajor" if a.stride(1) == 1 else "fast")
        if out is None:
            out = self.alloc.empty(a.shape[0], b.shape[0])
        if path not in self.unwritten:
            out.copy_(self.product(a, b, sa, sb))
        return out


@pytest.fixture
def on_cpu(bench_module, reference, monkeypatch):
    """benchmarks/gemm.py with CPU inputs, a cuBLASLt stand-in (the exact product in
    bf16; `cublas["wrong_unless_first_a"]` makes it answer wrongly for any `a` but the
    first it saw) and every timing a single call."""
    import torch.nn.functional as F

    cublas = {"wrong_unless_first_a": False, "first_a": None}

    def scaled_mm(a, b, sa, kind_a, sb, kind_b, output_dtype=None):
        kb = math.ceil(a.shape[1] / 128)
        out = reference.gemm_nt_reference(a, b.t(), sa, sb[:kb].t()).to(torch.bfloat16)
        if cublas["first_a"] is None:
            cublas["first_a"] = a
        if cublas["wrong_unless_first_a"] and a is not cublas["first_a"]:
            out = -out
        return out

    monkeypatch.setattr(F, "scaled_mm", scaled_mm, raising=False)
    make_inputs = bench_module.make_inputs
    monkeypatch.setattr(bench_module, "make_inputs",
                        lambda *args, **kw: make_inputs(*args, device="cpu", **kw))
    monkeypatch.setattr(bench_module, "bench", lambda fn, rep_ms, host=None: (fn(), 1.0)[1])
    return cublas


def run(bench_module, kernel, challenge=True, sweep=False):
    return bench_module.run_shape(kernel, 64, 256, 256, challenge, "H100", 30, sweep)


def test_a_correct_kernel_passes_and_is_timed(bench_module, reference, on_cpu) -> None:
    row = run(bench_module, FakeKernel(reference))
    assert row["calc_diff_vs_cublas"] == 0.0
    assert row["exact_mismatches"] == 0
    assert {"fast_us", "exact_us", "cublas_us", "cublas_t_us", "fast_kmajor_us"} <= set(row)


@pytest.mark.parametrize("path", ["fast", "kmajor", "exact"])
def test_an_unwritten_output_is_caught(bench_module, reference, on_cpu, path) -> None:
    # A path that writes nothing must fail its check even where the allocator hands it
    # the block of an output checked just before it (the product, right to the last bit).
    with pytest.raises(bench_module.ContractError):
        run(bench_module, FakeKernel(reference, unwritten={path}))


def test_the_transposed_baseline_is_checked(bench_module, reference, on_cpu) -> None:
    # cuBLASLt after the .contiguous() copies is timed too: its output must be the product.
    on_cpu["wrong_unless_first_a"] = True
    with pytest.raises(bench_module.ContractError, match="transpose"):
        run(bench_module, FakeKernel(reference))


def test_the_sweep_times_no_wrong_or_unwritten_output(bench_module, reference, on_cpu) -> None:
    kernel = FakeKernel(reference, wrong_variants={7, 20}, unwritten_variants={0, 3})
    row = run(bench_module, kernel, challenge=False, sweep=True)
    sweep = row["sweep_us"]
    for key in ("v7s0", "v20s0", "v0s0", "v3s0", "v0s0z2"):
        assert isinstance(sweep[key], str) and sweep[key].startswith("wrong output"), key
    assert isinstance(sweep["v2s0"], float)
    assert isinstance(sweep["v4s0"], float)
