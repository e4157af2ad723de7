"""Diagnostics for failures seen on the GPU machine (not a test).

    python kernels/gemm/dev/diag.py numerics|exceptions
"""

from __future__ import annotations

import faulthandler
import sys

import torch
from _kernel import load_kernel

faulthandler.enable()
gk = load_kernel()
ops = gk._ops.ops
ref = gk.reference
FN = torch.float8_e4m3fn


def inputs(m, n, k, mn, seed=1, mag=1.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    kb, nb = -(-k // 128), -(-n // 128)
    a = (torch.randn(m, k, generator=g, device="cuda") * mag)
    b = (torch.randn(n, k, generator=g, device="cuda") * mag)
    a = a.t().contiguous().to(FN).t() if mn else a.to(FN)
    b = b.t().contiguous().to(FN).t() if mn else b.to(FN)
    sa = torch.randn(m, kb, generator=g, device="cuda")
    sb = torch.randn(nb, kb, generator=g, device="cuda")
    return a, b, sa, sb


def numerics():
    for m, n, k, mn, mag in ((6144, 1536, 7168, True, 1.0), (6144, 1536, 7168, True, 2.0),
                             (4096, 4096, 7168, False, 1.0), (1024, 1536, 7168, True, 1.0)):
        a, b, sa, sb = inputs(m, n, k, mn, mag=mag)
        print(f"magnitude {mag}")
        r64 = ref.gemm_nt_reference(a, b, sa, sb)
        r32 = ref.gemm_nt_reference(a, b, sa, sb, torch.float32)
        print(f"{m}x{n}x{k}: fp32 ref vs fp64 calc_diff {ref.calc_diff(r32, r64):.3g}", flush=True)
        for v, s in ((0, 0), (0, 1), (0, 4), (1, 0), (2, 0), (3, 0), (3, 1), (4, 0)):
            exact = v >= 3
            out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
            ops.gemm_nt_out(out, a, b, sa, sb, exact, v, s)
            torch.cuda.synchronize()
            d = ref.calc_diff(out, r64)
            mism = ref.challenge_mismatches(out, a, b, sa, sb)
            nan = int((~torch.isfinite(out)).sum())
            err = (out.double() - r64).abs()
            i = int(err.argmax())
            print(f"  v{v} s{s}: calc_diff {d:.3g} mismatches {mism} nonfinite {nan} "
                  f"maxerr {float(err.max()):.3g} at {divmod(i, n)} "
                  f"ref {float(r64.flatten()[i]):.4g}",
                  flush=True)
    for rows, cols in ((17, 200), (300, 7232)):
        x = torch.randn(rows, cols, device="cuda") * 3
        for dt in (FN, torch.float8_e4m3fnuz):
            for f, rf in ((gk.quantize_activation, ref.quantize_activation_reference),
                          (gk.quantize_weight, ref.quantize_weight_reference)):
                q, s = f(x, dt)
                rq, rs = rf(x, dt)
                qd = int((q.view(torch.uint8) != rq.view(torch.uint8)).sum())
                sd = int((s != rs).sum())
                print(f"quant {rows}x{cols} {dt} {f.__name__}: q diffs {qd}, scale diffs {sd} "
                      f"of {s.numel()}", flush=True)


def exceptions():
    a, b, sa, sb = inputs(64, 128, 256, False)
    cases = [
        ("b_scale shape", lambda: ops.gemm_nt(a, b, sa, sb[:, :1], False)),
        ("a dtype", lambda: ops.gemm_nt(a.float(), b, sa, sb, False)),
        ("variant", lambda: ops.gemm_nt(a, b, sa, sb, False, 3)),
        ("quant", lambda: ops.quantize_1x128(torch.zeros(3, device="cuda"), False)),
    ]
    for name, fn in cases:
        print(f"calling: {name}", flush=True)
        try:
            fn()
            print("  no exception", flush=True)
        except Exception as err:
            print(f"  {type(err).__name__}: {str(err)[:120]}", flush=True)


{"numerics": numerics, "exceptions": exceptions}[sys.argv[1]]()
