"""How fast one SM runs a K block when few or all SMs are busy.

    python kernels/gemm/dev/wave_rate.py [VARIANT] [K]

Times one kernel variant (default 10, the hand-written kernel) on NT problems of
512 x 128c x K for growing c, so that the grid holds 4c output tiles of 128x128: from a
few SMs busy to every SM busy and two tiles per SM. Each CTA then runs the same work per
tile, and the time per K block and tile tells whether an SM slows down when the others
are busy (a chip-wide limit: power and clocks, L2 or memory) or not (a per-SM limit).
While the largest problem repeats for a few seconds, the SM clock and board power are
sampled with nvidia-smi. The kernel comes from GEMM_KERNEL_PATH or GEMM_KERNEL_REPO as
for benchmarks/gemm.py.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[3]
# benchmarks/gemm.py (NT inputs, timing with L2 flushed, kernel loading) under its own
# name: "gemm" is the kernel package's.
_spec = importlib.util.spec_from_file_location("gemm_benchmark", REPO / "benchmarks" / "gemm.py")
bench_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_mod)


def inputs(m, n, k):
    a, b, sa, sb, _, _ = bench_mod.make_inputs(m, n, k, challenge=False, seed=m + n + k)
    return a, b, sa, sb


def main() -> int:
    gk = bench_mod.load_kernel()
    ops = gk._ops.ops
    variant = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    k = int(sys.argv[2]) if len(sys.argv) > 2 else 7168
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    kb = -(-k // 128)
    print(f"device {torch.cuda.get_device_name()}, {sms} SMs, variant {variant}, K = {k}")
    print("| tiles | tiles per SM (max) | us | us per K block per tile | TFLOP/s |")
    print("|---|---|---|---|---|")
    cols = [1, 2, 4, 8, 16, sms // 8, sms // 4, sms // 2, sms // 4 * 3, sms // 4 + sms // 4 * 3,
            sms // 2 + sms // 4 * 3]
    for c in sorted(set(cols)):
        m, n = 512, 128 * c
        tiles = 4 * c
        a, b, sa, sb = inputs(m, n, k)
        us = bench_mod.bench(
            lambda a=a, b=b, sa=sa, sb=sb: ops.gemm_nt(a, b, sa, sb, False, variant, 0, 0), 200)
        per = -(-tiles // sms)
        print(f"| {tiles} | {per} | {us:.1f} | {us / (per * kb):.3f} | "
              f"{2 * m * n * k / us / 1e6:.0f} |", flush=True)
    # Clock and power while the whole chip is busy.
    m, n = 4096, 7168
    a, b, sa, sb = inputs(m, n, k)
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                            "--format=csv,noheader", "-lms", "200"],
                           stdout=subprocess.PIPE, text=True)
    end = time.time() + 3.0
    while time.time() < end:
        for _ in range(20):
            ops.gemm_nt(a, b, sa, sb, False, variant, 0, 0)
        torch.cuda.synchronize()
    smi.terminate()
    samples = smi.communicate()[0].strip().splitlines()
    print(f"\n{m}x{n}x{k} repeated for 3 s: SM clock, power, temperature every 200 ms:")
    print("; ".join(s.strip() for s in samples[2:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
