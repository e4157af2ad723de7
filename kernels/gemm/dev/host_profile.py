"""Where the op's host time goes: the CPU side of a few calls under torch.profiler.

    python kernels/gemm/dev/host_profile.py nt:64x2112x7168 nt:64x32768x512

Per shape: the host microseconds per call (calls queued behind a GPU sleep) of the op,
of the registered op called directly (through its overload packet and its default
overload), of the Python argument checks alone, of cuBLASLt's block-scaled path through
torch's `scaled_mm`, and the profiler's CPU table (CUDA runtime calls included) over 200
calls. ``HOSTPROFILE_TABLE=0`` leaves the table out.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

# host_gap.py's timing of the host path, and benchmarks/gemm.py through it.
_spec = importlib.util.spec_from_file_location("host_gap", Path(__file__).with_name("host_gap.py"))
host_gap = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(host_gap)
bench_mod = host_gap.bench_mod
CALLS = 200


def per_call_us(fn) -> float:
    return host_gap.host_us(fn, CALLS)


def main() -> int:
    gk = bench_mod.load_kernel()
    validate = sys.modules[gk.__name__ + "._validate"]
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for spec in sys.argv[1:]:
        layout, _, dims = spec.partition(":")
        m, n, k = (int(x) for x in dims.split("x"))
        a, b, sa, sb, sa_kb_m, sb_nb_kb = bench_mod.make_inputs(m, n, k, layout == "challenge", 1)
        # cuBLASLt's block-scaled path as the benchmark calls it (K-major operands given).
        cublas = bench_mod.cublas_fn(a.contiguous(), b.contiguous(),
                                     *bench_mod.cublas_scales(sa_kb_m, sb_nb_kb))
        op = lambda a=a, b=b, sa=sa, sb=sb: gk.gemm_nt(a, b, sa, sb)  # noqa: E731
        raw = lambda a=a, b=b, sa=sa, sb=sb: gk._ops.ops.gemm_nt(a, b, sa, sb, False)  # noqa: E731
        overload = lambda a=a, b=b, sa=sa, sb=sb: gk._ops.ops.gemm_nt.default(a, b, sa, sb, False)  # noqa: E731
        check = lambda a=a, b=b, sa=sa, sb=sb: validate.check_gemm(a, b, sa, sb, None, layout="nt")  # noqa: E731
        for fn in (op, raw, overload, cublas):
            fn()
        t_check = min(per_call_us(check) for _ in range(3))
        t_op = min(per_call_us(op) for _ in range(3))
        t_raw = min(per_call_us(raw) for _ in range(3))
        t_overload = min(per_call_us(overload) for _ in range(3))
        t_cublas = min(per_call_us(cublas) for _ in range(3))
        p = gk.plan_nt(a, b, sa, sb)
        print(f"\n{spec} ({p.name}, splits {p.splits}): op {t_op:.1f} us per call, "
              f"the registered op alone {t_raw:.1f} (its default overload {t_overload:.1f}), "
              f"Python checks {t_check:.1f}; cuBLASLt (torch scaled_mm) {t_cublas:.1f}")
        if os.environ.get("HOSTPROFILE_TABLE", "1") == "0":
            continue
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            torch.cuda._sleep(400_000_000)
            for _ in range(CALLS):
                op()
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14,
                                        max_name_column_width=60))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
