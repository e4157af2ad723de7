"""How far exact mode's BF16 GEMM is from cuBLAS's plain BF16 GEMM (not a test).

    python kernels/gemm/dev/exact_ceiling.py nt:4096x7168x16384 challenge:6144x4608x7168 ...

Exact mode converts the FP8 operands to BF16 (one preparation launch) and runs a BF16
block-scaled GEMM. Per shape, timed in interleaved rounds with the L2 flushed: the op in
exact and fast mode, and cuBLAS's BF16 GEMM without scales on the same operands already
converted (`torch.mm`; no block scales, so an upper bound on what a BF16 kernel can do).
Then one profiled run of exact mode splits its time into the preparation and the GEMM
kernel, both as kernel durations.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("gemm_benchmark", REPO / "benchmarks" / "gemm.py")
bench_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_mod)
ROUNDS = 5


def main() -> int:
    gk = bench_mod.load_kernel()
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| shape | exact us | fast us | cuBLAS BF16 (no scales) us | exact: preparation us | "
          "exact: GEMM kernel us | GEMM TFLOP/s | cuBLAS BF16 TFLOP/s |")
    print("|---|---|---|---|---|---|---|---|")
    for spec in sys.argv[1:] or ["nt:4096x7168x16384"]:
        layout, _, dims = spec.partition(":")
        m, n, k = (int(x) for x in dims.split("x"))
        a, b, sa, sb, _, _ = bench_mod.make_inputs(m, n, k, layout == "challenge", seed=1)
        a16 = a.to(torch.bfloat16).contiguous()
        b16 = b.to(torch.bfloat16).contiguous()
        fns = {"exact": lambda a=a, b=b, sa=sa, sb=sb: gk.gemm_nt(a, b, sa, sb, precision="exact"),
               "fast": lambda a=a, b=b, sa=sa, sb=sb: gk.gemm_nt(a, b, sa, sb),
               "bf16": lambda a16=a16, b16=b16: torch.mm(a16, b16.t())}
        t = bench_mod.interleaved(fns, 30 * ROUNDS, ROUNDS)
        for _ in range(3):
            fns["exact"]()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                fns["exact"]()
            torch.cuda.synchronize()
        durations: dict[str, list[float]] = {}
        for ev in prof.events():
            if ev.device_type == torch.autograd.DeviceType.CUDA and ev.time_range.elapsed_us() > 0:
                durations.setdefault(ev.name, []).append(ev.time_range.elapsed_us())
        prep = sum(statistics.mean(v) for name, v in durations.items() if "prep" in name)
        gemm = max((statistics.mean(v) for name, v in durations.items() if "prep" not in name),
                   default=float("nan"))
        flops = 2.0 * m * n * k
        print(f"| {spec} | {t['exact']:.1f} | {t['fast']:.1f} | {t['bf16']:.1f} | {prep:.1f} | "
              f"{gemm:.1f} | {flops / gemm / 1e6:.0f} | {flops / t['bf16'] / 1e6:.0f} |",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
