"""Workload for Nsight Compute: our op and cuBLASLt, twice each, per shape.

    ncu --kernel-name regex:'device_kernel|prep_kernel|sm90' \
        python kernels/gemm/dev/ncu_profile.py [nt:MxNxK | challenge:MxNxK ...]

Without arguments: nt:4096x7168x16384 and challenge:1024x1536x7168. PROFILE_VARIANTS
("7,10") runs those kernel variants instead of the op's own choice. PROFILE_EXACT=1 runs
exact mode instead of fast, against cuBLAS's plain BF16 GEMM (`torch.mm`, no block
scales) on the same operands converted.
"""

from __future__ import annotations

import os
import sys

import torch
from _kernel import load_kernel
from torch.nn.functional import ScalingType, scaled_mm

gk = load_kernel()
VARIANTS = [int(v) for v in os.environ.get("PROFILE_VARIANTS", "").split(",") if v]
EXACT = bool(os.environ.get("PROFILE_EXACT"))
FN = torch.float8_e4m3fn


def shapes():
    """(label, m, n, k, MN-major storage) for each argument."""
    specs = sys.argv[1:] or ["nt:4096x7168x16384", "challenge:1024x1536x7168"]
    out = []
    for spec in specs:
        layout, _, dims = spec.partition(":")
        if layout not in ("nt", "challenge"):
            raise SystemExit(f"ncu_profile.py: {spec!r}: expected nt:MxNxK or challenge:MxNxK")
        m, n, k = (int(x) for x in dims.split("x"))
        out.append((f"{layout}-{dims}", m, n, k, layout == "challenge"))
    return out


for label, m, n, k, mn in shapes():
    kb, nb = -(-k // 128), -(-n // 128)
    if mn:  # MN-major storage, handed over as transposed views
        a = torch.randn(k, m, device="cuda").to(FN).t()
        b = torch.randn(k, n, device="cuda").to(FN).t()
    else:
        a = torch.randn(m, k, device="cuda").to(FN)
        b = torch.randn(n, k, device="cuda").to(FN)
    sa = torch.randn(kb, m, device="cuda")
    sb = torch.randn(nb, kb, device="cuda")
    sbp = torch.zeros(nb, -(-kb // 4) * 4, device="cuda")
    sbp[:, :kb] = sb
    ak, bk = a.contiguous(), b.contiguous()
    a16, b16 = ak.to(torch.bfloat16), bk.to(torch.bfloat16)
    torch.cuda.nvtx.range_push(label)
    for _ in range(2):
        if VARIANTS:
            for v in VARIANTS:
                gk._ops.ops.gemm_nt(a, b, sa.t(), sb, EXACT, v, -1)
        else:
            gk.gemm_nt(a, b, sa.t(), sb, precision="exact" if EXACT else "fast")
        if EXACT:
            torch.mm(a16, b16.t())
        else:
            scaled_mm(ak, bk.t(), sa.t(), ScalingType.BlockWise1x128, sbp.t(),
                      ScalingType.BlockWise128x128, output_dtype=torch.bfloat16)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
print("profile workload done")
