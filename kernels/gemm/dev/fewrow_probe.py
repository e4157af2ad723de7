"""Per-CTA phase times of the few-row kernel (variants 18 and 24) under the benchmark's flush.

Needs a build of ``gemm/fp8_fewrow.cu`` with ``KFGEMM_FEWROW_PROBE`` defined: every CTA
then records %globaltimer at its start, after its set-up, at its producer's first and
last TMA issue, at its consumers' first and last full stage, after its last promotion
and after its epilogue, and a second launch prints the records.

    python kernels/gemm/dev/fewrow_probe.py nt:64x2112x7168:18:0 nt:64x2112x7168:24:6 ...

Printed per configuration (medians over the calls): each phase's time after the first
CTA started, as the earliest, median and latest CTA reached it, in microseconds.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import io
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch

os.environ["KFGEMM_FEWROW_PROBE"] = "1"  # the probe build prints its records only then

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("gemm_benchmark", REPO / "benchmarks" / "gemm.py")
bench_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_mod)

CALLS = 7
PHASES = [("start", 1), ("set up", 2), ("dependents", 12), ("policy", 13), ("unit", 14),
          ("consumers in", 15), ("first issue", 3), ("last issue", 4), ("first full", 7),
          ("last full", 8), ("promoted", 9), ("stored", 10)]
libc = ctypes.CDLL(None)


def capture(fn) -> str:
    """Runs fn with the process's stdout (fd 1) sent to a file; returns what was written."""
    sys.stdout.flush()
    libc.fflush(None)
    saved = os.dup(1)
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 1)
        try:
            fn()
            torch.cuda.synchronize()
            libc.fflush(None)
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        f.seek(0)
        return f.read().decode()


def records(text: str) -> list[list[int]]:
    rows = []
    for line in io.StringIO(text):
        if line.startswith("KFPROBE "):
            rows.append([int(x) for x in line.split()[1:]])
    return rows


def main() -> int:
    gk = bench_mod.load_kernel()
    ops = gk._ops.ops
    cache = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device="cuda")
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for spec in sys.argv[1:]:
        layout, dims, variant, splits, *rest = spec.split(":")
        m, n, k = (int(x) for x in dims.split("x"))
        variant, splits = int(variant), int(splits)
        swizzle = int(rest[0]) if rest else 0
        a, b, sa, sb, _, _ = bench_mod.make_inputs(m, n, k, layout == "challenge", 1)
        call = functools.partial(ops.gemm_nt, a, b, sa, sb, False, variant, splits, swizzle)
        for _ in range(3):
            capture(call)
        per_call = []
        for _ in range(CALLS):
            cache.zero_()
            rows = records(capture(call))
            rows = [r for r in rows if r[2] > 0 and r[8] > 0]  # CTAs that ran a unit
            if not rows:
                print(f"{spec}: no records (is the probe built in?)")
                return 1
            base = min(r[2] for r in rows)
            per_call.append({name: sorted((r[1 + col] - base) / 1e3 for r in rows)
                             for name, col in PHASES})
            per_call[-1]["span"] = [statistics.median((r[9] - r[8]) / 1e3 for r in rows)]
        print(f"\n{spec} ({len(rows)} CTAs), us after the first CTA's start: earliest / "
              "median / latest CTA")
        for name, _ in PHASES:
            lo = statistics.median(c[name][0] for c in per_call)
            mid = statistics.median(c[name][len(c[name]) // 2] for c in per_call)
            hi = statistics.median(c[name][-1] for c in per_call)
            print(f"  {name:12s} {lo:7.2f} {mid:7.2f} {hi:7.2f}")
        span = statistics.median(c["span"][0] for c in per_call)
        print(f"  a CTA's first to last full stage, median over CTAs: {span:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
