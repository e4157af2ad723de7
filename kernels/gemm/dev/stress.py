"""Launches one configuration many times on the same inputs and compares every output
bitwise with the first (the kernels are deterministic, so any difference is a race).

    python kernels/gemm/dev/stress.py nt:4096x4096x7168:22:exact challenge:4096x4096x7168:20:exact \
        nt:4096x4096x7168:-1:fast [--launches 300] [--busy]

Specs are layout:MxNxK:variant:precision (layouts of the GPU tests' layout_inputs: nt,
challenge, guide, a_mn; variant -1: the op's choice). --busy keeps a second stream busy
with matrix products meanwhile, so that the kernel shares the GPU and its warps' timing
shifts. Exits 1 if any configuration's outputs differ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "gpu"))
from test_gemm import layout_inputs  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab import bench_mod  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("specs", nargs="+")
    ap.add_argument("--launches", type=int, default=300)
    ap.add_argument("--busy", action="store_true")
    args = ap.parse_args()
    gk = bench_mod.load_kernel()
    ops = gk._ops.ops
    side = torch.cuda.Stream()
    x = torch.randn(4096, 4096, device="cuda")
    racy = 0
    for spec in args.specs:
        layout, dims, variant, precision = spec.split(":")
        m, n, k = (int(v) for v in dims.split("x"))
        a, b, sa, sb = layout_inputs(m, n, k, layout, 1234)
        exact = precision == "exact"
        first = ops.gemm_nt(a, b, sa, sb, exact, int(variant), -1)
        outs = [torch.empty_like(first) for _ in range(8)]
        differing, worst, example = 0, 0, None
        for i in range(args.launches):
            if args.busy and i % 4 == 0:
                with torch.cuda.stream(side):
                    for _ in range(3):
                        x = (x @ x).clamp_(-1, 1)
            out = outs[i % 8]
            out.fill_(float("nan"))
            ops.gemm_nt_out(out, a, b, sa, sb, exact, int(variant), -1)
            if i % 8 == 7 or i == args.launches - 1:
                for o in outs[: i % 8 + 1]:
                    diff = o.view(torch.int16) != first.view(torch.int16)
                    nd = int(diff.sum())
                    if nd:
                        differing += 1
                        if nd > worst:
                            worst = nd
                            idx = diff.nonzero()
                            tiles = torch.unique((idx[:, 0] // 128) * 1000 + idx[:, 1] // 128)
                            rows = torch.unique(idx[:, 0] % 128)
                            cols = torch.unique(idx[:, 1] % 128)
                            example = (f"{len(tiles)} tiles, first {idx[0].tolist()}, "
                                       f"{len(rows)} rows in tile {rows[:16].tolist()}, "
                                       f"{len(cols)} columns {cols[:16].tolist()}")
        torch.cuda.synchronize()
        print(f"{spec}{' busy' if args.busy else ''}: {differing} of {args.launches} launches "
              f"differ from the first; most elements {worst}; {example or ''}", flush=True)
        racy += differing > 0
    return 1 if racy else 0


if __name__ == "__main__":
    raise SystemExit(main())
