"""Exact mode against the challenge's checker, with the float32 reference the checker
uses and a float64 one side by side: for each element that fails either, print the
output, both references and the tolerance, so that a miss can be told to be the
kernel's or the float32 reference's own rounding.

Usage (on the GPU, the kernel loaded as benchmarks/gemm.py loads it):
    python kernels/gemm/dev/exact_miss.py [MxNxK[:seed] ...]   (challenge layout)
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

bench_path = Path(__file__).resolve().parents[3] / "benchmarks" / "gemm.py"
spec = importlib.util.spec_from_file_location("gemm_bench", bench_path)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def main(args: list[str]) -> None:
    gk = bench.load_kernel()
    for arg in args or ["6144x1536x7168"]:
        shape, _, seed = arg.partition(":")
        m, n, k = (int(x) for x in shape.split("x"))
        seed = int(seed) if seed else m * 7 + n * 3 + k  # the benchmark's seed
        a, b, sa, sb, _, _ = bench.make_inputs(m, n, k, True, seed)
        out = gk.gemm_nt(a, b, sa, sb, precision="exact").float()
        r32 = gk.reference.gemm_nt_reference(a, b, sa, sb, torch.float32)
        r64 = gk.reference.gemm_nt_reference(a, b, sa, sb, torch.float64)
        bad = torch.zeros_like(out, dtype=torch.bool)
        for name, ref in (("f32", r32), ("f64", r64)):
            rb = ref.to(torch.bfloat16).float()
            miss = ~((out - rb).abs() <= 1e-3 + 2e-2 * rb.abs())
            gap = float((r32.double() - r64).abs().max())
            print(f"{m}x{n}x{k} seed {seed}: misses against the {name} reference: "
                  f"{int(miss.sum())}; max |f32 - f64| {gap:.3g}")
            bad |= miss
        for i, j in bad.nonzero().tolist()[:20]:
            print(f"  [{i},{j}] out {out[i, j].item():.6g}  f32 {r32[i, j].item():.6g}  "
                  f"f64 {r64[i, j].item():.9g}  f32->bf16 {r32[i, j].bfloat16().item():.6g}  "
                  f"f64->bf16 {r64[i, j].bfloat16().item():.6g}  "
                  f"|out-f64| {abs(out[i, j].item() - r64[i, j].item()):.3g}")


if __name__ == "__main__":
    main(sys.argv[1:])
