"""How fine must FP8 MMA promotion be for the challenge checker to pass? (not a test)

Fast mode promotes the tensor cores' FP32 accumulator into the block-scaled result once per
128 of K. Hopper's FP8 MMA adds its products with about 14 bits of precision, so over the
challenge shapes some elements miss the checker's tolerance. This script emulates a kernel
that starts a fresh MMA accumulator every S of K (S = 32: every k32 wgmma) and adds it into
FP32 times the block's scales, with cuBLASLt's FP8 GEMM of unit scales on each K slice, and
counts the checker's mismatches for S = 32, 64 and 128. S = 128 is the fast kernel's own
order, so its output is compared with the op's fast mode as a check on the emulation.

    python kernels/gemm/dev/exact_probe.py [seeds]
"""

from __future__ import annotations

import sys

import torch
from _kernel import load_kernel

gk = load_kernel()
ref = gk.reference
FN = torch.float8_e4m3fn

BENCH = [(m, n, k) for m in (1024, 6144) for n, k in (
    (1536, 7168), (3072, 1536), (576, 7168), (7168, 256), (7168, 2048), (4608, 7168),
    (7168, 2304), (512, 7168), (4096, 512))]
TESTS = [(64, 64, 128), (64, 1536, 7168), (64, 3072, 1536), (64, 576, 7168), (96, 7168, 256),
         (96, 7168, 2048), (96, 4608, 7168), (128, 7168, 2304), (128, 512, 7168),
         (512, 4096, 512), (512, 1536, 7168)]


def inputs(m, n, k, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    kb, nb = -(-k // 128), -(-n // 128)
    a = torch.randn(m, k, generator=g, device="cuda").to(FN)
    b = torch.randn(n, k, generator=g, device="cuda").to(FN)
    sa = torch.randn(m, kb, generator=g, device="cuda")
    sb = torch.randn(nb, kb, generator=g, device="cuda")
    return a, b, sa, sb


def emulate(a, b, sa, sb, s):
    m, k = a.shape
    n = b.shape[0]
    one = torch.ones((), device="cuda")
    acc = torch.zeros(m, n, device="cuda")
    sbn = sb.repeat_interleave(128, dim=0)[:n]  # (n, kb)
    for k0 in range(0, k, s):
        t = torch._scaled_mm(a[:, k0:k0 + s].contiguous(), b[:, k0:k0 + s].contiguous().t(),
                             scale_a=one, scale_b=one, out_dtype=torch.float32)
        kb = k0 // 128
        acc.addcmul_(t, sa[:, kb:kb + 1] * sbn[:, kb][None, :])
    return acc.to(torch.bfloat16)


def main():
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    total = {32: 0, 64: 0, 128: 0, "op": 0}
    elems = 0
    for m, n, k in BENCH + TESTS:
        for seed in range(1, seeds + 1):
            a, b, sa, sb = inputs(m, n, k, 1000 * seed + m + n + k)
            op = gk._ops.ops.gemm_nt(a, b, sa, sb, False)
            row = [f"{m}x{n}x{k} seed {seed}:"]
            bad = ref.challenge_mismatches(op, a, b, sa, sb)
            total["op"] += bad
            row.append(f"op {bad}")
            for s in (32, 64, 128):
                e = emulate(a, b, sa, sb, s)
                bad = ref.challenge_mismatches(e, a, b, sa, sb)
                total[s] += bad
                row.append(f"S={s} {bad}")
                if s == 128:
                    row.append(f"(S=128 differs from op on {int((e != op).sum())})")
            elems += m * n
            print(" ".join(row), flush=True)
    print(f"elements {elems}; mismatches: " + ", ".join(f"{key} {v}" for key, v in total.items()))


if __name__ == "__main__":
    main()
