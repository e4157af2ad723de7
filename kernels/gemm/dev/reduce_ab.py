"""A/B of the split-K sum's two builds (experiment): KFGEMM_REDUCE_SERIAL set or not.

    python kernels/gemm/dev/reduce_ab.py nt:64x2112x7168 challenge:1024x576x7168 ...
"""

from __future__ import annotations

import functools
import importlib.util
import os
import random
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("gemm_benchmark", REPO / "benchmarks" / "gemm.py")
bench_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_mod)
ROUNDS = 9


def main() -> int:
    gk = bench_mod.load_kernel()
    ops = gk._ops.ops
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| shape | plan | serial | batched | v18s0 serial | v18s0 batched | cuBLASLt |")
    print("|---|---|---|---|---|---|---|")
    for spec in sys.argv[1:]:
        layout, _, dims = spec.partition(":")
        m, n, k = (int(x) for x in dims.split("x"))
        a, b, sa, sb, sa_kb_m, sb_nb_kb = bench_mod.make_inputs(m, n, k, layout == "challenge", 1)
        csa, csb = bench_mod.cublas_scales(sa_kb_m, sb_nb_kb)
        op = functools.partial(gk.gemm_nt, a, b, sa, sb)
        v18 = functools.partial(ops.gemm_nt, a, b, sa, sb, False, 18, 0)
        os.environ.pop("KFGEMM_REDUCE_SERIAL", None)
        ref = op()
        os.environ["KFGEMM_REDUCE_SERIAL"] = "1"
        same = torch.equal(op().view(torch.int16), ref.view(torch.int16))
        fns = {"serial": (op, True), "batched": (op, False), "v18 serial": (v18, True),
               "v18 batched": (v18, False),
               "cublas": (bench_mod.cublas_fn(a.contiguous(), b.contiguous(), csa, csb), False)}
        times = {name: [] for name in fns}
        for r in range(ROUNDS):
            order = list(fns)
            random.Random(r).shuffle(order)
            for name in order:
                fn, serial = fns[name]
                if serial:
                    os.environ["KFGEMM_REDUCE_SERIAL"] = "1"
                else:
                    os.environ.pop("KFGEMM_REDUCE_SERIAL", None)
                times[name].append(bench_mod.bench(fn, 20))
        med = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
        p = gk.plan_nt(a, b, sa, sb)
        print(f"| {m}x{n}x{k} {layout} | {p.variant}s{p.splits} bitwise={same} | "
              f"{med['serial']:.1f} | {med['batched']:.1f} | "
              f"{med['v18 serial']:.1f} | {med['v18 batched']:.1f} | "
              f"{med['cublas']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
