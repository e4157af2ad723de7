"""Whether host time is inside the benchmark's timings of short calls.

    python kernels/gemm/dev/host_gap.py nt:64x32768x512 challenge:1024x576x7168 ...

``triton.testing.do_bench`` flushes the L2 (a 256 MB write), records the start event,
then calls the function. If the host needs longer to get from the flush to the
function's last launch than the GPU needs for the flush, the GPU waits between the start
event and the kernels, and the wait is counted as the function's time. Per shape and
function (the op, cuBLASLt given K-major operands, and for the NT layout a Triton read
of B's bytes), in interleaved rounds:

- ``host``: host microseconds per call, with the calls queued behind a long GPU sleep so
  that the host never waits for the GPU;
- ``bench``: the benchmark's median (the same loop as do_bench);
- ``ahead``: the same loop with a GPU sleep between the flush and the start event, so
  that the function's launches are queued before the GPU reaches the start event: GPU
  time alone.

``bench - ahead`` is the host time the benchmark counts.
"""

from __future__ import annotations

import importlib.util
import random
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("gemm_benchmark", REPO / "benchmarks" / "gemm.py")
bench_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_mod)
_floor_spec = importlib.util.spec_from_file_location(
    "stream_floor", Path(__file__).with_name("stream_floor.py"))
floor_mod = importlib.util.module_from_spec(_floor_spec)
_floor_spec.loader.exec_module(floor_mod)

ROUNDS = 5
REPS = 200
SLEEP_CYCLES = 400_000  # about 200 us at the clocks these GPUs run: longer than any host path


def host_us(fn, calls: int = 100) -> float:
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)  # keeps the GPU busy while the host queues the calls
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def gpu_us(fn, cache: torch.Tensor, ahead: bool, reps: int = REPS) -> float:
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    for i in range(reps):
        cache.zero_()
        if ahead:
            torch.cuda._sleep(SLEEP_CYCLES)
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    t = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends, strict=True))
    return t[len(t) // 2]


def main() -> int:
    gk = bench_mod.load_kernel()
    specs = sys.argv[1:] or ["nt:64x32768x512", "nt:64x2112x7168", "challenge:1024x576x7168"]
    cache = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device="cuda")
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| shape | function | host us | bench us | ahead us | bench - ahead |")
    print("|---|---|---|---|---|---|")
    for spec in specs:
        layout, _, dims = spec.partition(":")
        m, n, k = (int(x) for x in dims.split("x"))
        challenge = layout == "challenge"
        a, b, sa, sb, sa_kb_m, sb_nb_kb = bench_mod.make_inputs(m, n, k, challenge, 1)
        csa, csb = bench_mod.cublas_scales(sa_kb_m, sb_nb_kb)
        fns = {"op": lambda a=a, b=b, sa=sa, sb=sb: gk.gemm_nt(a, b, sa, sb),
               "cuBLASLt": bench_mod.cublas_fn(a.contiguous(), b.contiguous(), csa, csb)}
        if not challenge:
            stream = floor_mod.streaming_read(b)
            fns["read B"] = stream["8x2048"]
        res = {name: {"host": [], "bench": [], "ahead": []} for name in fns}
        for r in range(ROUNDS):
            order = list(fns)
            random.Random(r).shuffle(order)
            for name in order:
                res[name]["host"].append(host_us(fns[name]))
                res[name]["bench"].append(gpu_us(fns[name], cache, False))
                res[name]["ahead"].append(gpu_us(fns[name], cache, True))
        for name, t in res.items():
            med = {key: sorted(v)[len(v) // 2] for key, v in t.items()}
            print(f"| {m}x{n}x{k} {layout} | {name} | {med['host']:.1f} | {med['bench']:.1f} | "
                  f"{med['ahead']:.1f} | {med['bench'] - med['ahead']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
