"""Per-kernel GPU timeline of explicit configurations, without serializing anything.

    python kernels/gemm/dev/timeline.py challenge:6144x4608x7168 [nt:MxNxK ...]

For each shape and configuration (TIMELINE_CONFIGS="7,10" by default: kernel variants in
fast mode, each optionally with a swizzle argument as "7/2"), the op runs back to back as
in a benchmark loop (no L2 flush in between) under torch.profiler. Printed per
configuration: the mean wall time per call (first kernel start to last kernel end, over
the calls), each kernel's mean duration, and the mean gap or overlap between consecutive
kernels of a call (negative: the dependent launch started before the previous kernel
ended). Kernel start and end times come from the profiler's CUDA activity records.

TIMELINE_FLUSH=1 runs each call after an L2 flush as the benchmark does (zeroing 256 MB,
which leaves the L2 full of dirty lines); the flush is the call's first kernel and the
gap after it shows how late the op's first kernel starts. The configuration "r" is a
streaming read of B (stream_floor.py), the floor of the few-row shapes.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("gemm_benchmark", REPO / "benchmarks" / "gemm.py")
bench_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_mod)

# "variant", "variant/swizzle" or "variant/swizzle/splits"; "op" for the op's choice, "r"
# for reading B
CONFIGS = [c for c in os.environ.get("TIMELINE_CONFIGS", "7,10").split(",") if c]
FLUSH = bool(os.environ.get("TIMELINE_FLUSH"))
CALLS = 20


def kernels_of(prof):
    """(name, start_us, end_us) of every GPU kernel, in start order."""
    out = []
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA and ev.time_range.elapsed_us() > 0:
            out.append((ev.name, ev.time_range.start, ev.time_range.end))
    return sorted(out, key=lambda x: x[1])


def main() -> int:
    gk = bench_mod.load_kernel()
    ops = gk._ops.ops
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}")
    cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
    for spec in sys.argv[1:] or ["challenge:6144x4608x7168"]:
        layout, _, dims = spec.partition(":")
        m, n, k = (int(x) for x in dims.split("x"))
        a, b, sa, sb, _, _ = bench_mod.make_inputs(m, n, k, layout == "challenge", seed=1)
        for config in CONFIGS:
            if config == "r":
                from stream_floor import streaming_read

                op = streaming_read(b)["8x2048"]
            else:  # "op": the op's own choice
                v, z, s = ((-1, 0, -1) if config == "op" else
                           (int(x) for x in (config + "/0/0").split("/")[:3]))

                def op(a=a, b=b, sa=sa, sb=sb, v=v, z=z, s=s):
                    return ops.gemm_nt(a, b, sa, sb, False, v, s, z)

            def fn(op=op, cache=cache):
                if FLUSH:
                    cache.zero_()
                op()

            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(CALLS):
                    fn()
                torch.cuda.synchronize()
            ks = kernels_of(prof)
            per_call = len(ks) // CALLS
            if per_call == 0 or len(ks) % CALLS:
                print(f"{spec} {config}: {len(ks)} kernels for {CALLS} calls, cannot split")
                continue
            calls = [ks[i * per_call:(i + 1) * per_call] for i in range(CALLS)]
            wall = statistics.mean(c[-1][2] - c[0][1] for c in calls)
            period = (calls[-1][0][1] - calls[0][0][1]) / (CALLS - 1)
            print(f"{spec} {config}: {per_call} kernels/call, call {wall:.1f} us, "
                  f"period {period:.1f} us")
            for j in range(per_call):
                dur = statistics.mean(c[j][2] - c[j][1] for c in calls)
                line = f"   {calls[0][j][0][:70]:70s} {dur:8.1f} us"
                if j:
                    gap = statistics.mean(c[j][1] - c[j - 1][2] for c in calls)
                    line += f"  gap {gap:+.1f} us"
                print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
