"""How close a shape is to the time it takes just to read B, or just to write the output.

    python kernels/gemm/dev/stream_floor.py nt:64x32768x512 [nt:MxNxK ...]

With M = 64 or 128 the GEMM is bound by streaming B (N x K bytes) from memory; with a
short K and a large output, by writing the M x N bf16 output. Timed the
way the benchmark times (L2 flushed before every call, which leaves the L2 full of dirty
lines that the next reads must write back), in interleaved rounds as in ab.py: the op's
choice, cuBLASLt, a plain read of B (torch's sum over B's bytes viewed as float32; the
values are meaningless, the traffic is B's) and a device copy of B (read and write),
with each one's effective bandwidth over the bytes it moves; then writing the output alone
(`fill_(1.0)` and `zero_()` of an M x N bf16 tensor).

``FLOOR_FLUSH=both`` times every row a second time with the L2 left clean instead: before
each call a 256 MB buffer is read rather than written, so that the L2 holds no dirty
lines and a call's reads cost no write-backs (the share of each time that the
benchmark's way of flushing adds, for ours and cuBLASLt alike).
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("gemm_benchmark", REPO / "benchmarks" / "gemm.py")
bench_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_mod)
ROUNDS = 7


@functools.cache
def _read_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def read(src, dst, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        acc = tl.zeros([BLOCK], dtype=tl.int32)
        for start in range(pid * BLOCK, n, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            acc ^= tl.load(src + offs, mask=offs < n, other=0)
        tl.store(dst + pid, tl.xor_sum(acc, axis=0))

    return read


def streaming_read(x: torch.Tensor):
    """Callables reading x's bytes once with Triton, one per grid size (programs per SM)."""
    read = _read_kernel()
    words = x.contiguous().view(torch.int32).flatten()
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    fns = {}
    for per_sm, block, warps in ((4, 4096, 8), (8, 2048, 8), (16, 1024, 4)):
        grid = sms * per_sm
        dst = torch.empty(grid, dtype=torch.int32, device=x.device)
        fns[f"{per_sm}x{block}"] = (lambda g=grid, d=dst, b=block, w=warps:
                                    read[(g,)](words, d, words.numel(), BLOCK=b, num_warps=w))
    return fns


@functools.cache
def _flush_buffer() -> torch.Tensor:
    return torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")  # 256 MB


def _own_bench(fn, rep_ms: int, write: bool) -> float:
    """Median microseconds of ``fn`` after writing (``write``: as the benchmark flushes)
    or reading a 256 MB buffer before each call, timed by events around the call alone.
    A read leaves the L2 full of clean lines, a write full of dirty ones."""
    flush = _flush_buffer()
    fn()
    torch.cuda.synchronize()
    reps = max(20, rep_ms)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(reps)]
    for start, end in events:
        if write:
            flush.zero_()
        else:
            flush.sum()  # reads every byte; the result stays on the device
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    times = sorted(start.elapsed_time(end) for start, end in events)
    return times[len(times) // 2] * 1e3


def main() -> int:
    import os

    benches = {"full of dirty lines (the benchmark's bench)": bench_mod.bench}
    if os.environ.get("FLOOR_FLUSH") == "both":
        benches["full of dirty lines (256 MB written, the loop below)"] = (
            lambda fn, rep_ms: _own_bench(fn, rep_ms, write=True))
        benches["clean (256 MB read)"] = lambda fn, rep_ms: _own_bench(fn, rep_ms, write=False)
    for label, timer in benches.items():
        bench_mod.bench = timer
        print(f"\nL2 before each call: {label}")
        table()
    return 0


def table() -> None:
    gk = bench_mod.load_kernel()
    specs = sys.argv[1:] or ["nt:64x32768x512", "nt:64x7168x16384"]
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| shape | B MB | op us | op TB/s | cuBLASLt us | sum B us | sum TB/s | copy B us "
          "| copy TB/s | stream B us | stream TB/s | fill C us | zero C us | C TB/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for spec in specs:
        layout, _, dims = spec.partition(":")
        m, n, k = (int(x) for x in dims.split("x"))
        a, b, sa, sb, sa_kb_m, sb_nb_kb = bench_mod.make_inputs(m, n, k, layout == "challenge", 1)
        csa, csb = bench_mod.cublas_scales(sa_kb_m, sb_nb_kb)
        words = b.contiguous().view(torch.float32)
        dst = torch.empty_like(b.contiguous())
        c = torch.empty(m, n, dtype=torch.bfloat16, device=b.device)
        fns = {"op": lambda a=a, b=b, sa=sa, sb=sb: gk.gemm_nt(a, b, sa, sb),
               "cuBLASLt": bench_mod.cublas_fn(a.contiguous(), b.contiguous(), csa, csb),
               "read": lambda w=words: w.sum(),
               "copy": lambda d=dst, b=b: d.copy_(b),
               "fill": lambda c=c: c.fill_(1.0),
               "zero": lambda c=c: c.zero_()}
        stream = streaming_read(b)
        fns.update({f"stream {key}": fn for key, fn in stream.items()})
        t = bench_mod.interleaved(fns, 20 * ROUNDS, ROUNDS)
        t["stream"] = min(t[f"stream {key}"] for key in stream)
        mb = n * k / 1e6
        mb_c = 2 * m * n / 1e6
        print(f"| {m}x{n}x{k} {layout} | {mb:.1f} | {t['op']:.1f} | {mb / t['op']:.2f} | "
              f"{t['cuBLASLt']:.1f} | {t['read']:.1f} | {mb / t['read']:.2f} | "
              f"{t['copy']:.1f} | {2 * mb / t['copy']:.2f} | {t['stream']:.1f} | "
              f"{mb / t['stream']:.2f} | {t['fill']:.1f} | {t['zero']:.1f} | "
              f"{mb_c / min(t['fill'], t['zero']):.2f} |", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
