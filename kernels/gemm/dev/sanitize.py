"""A small workload that runs every code path once, for compute-sanitizer.

    compute-sanitizer --tool memcheck python kernels/gemm/dev/sanitize.py \
        [all | v10 | amn | split | bf16 | fewrow | cluster | exactmn | exactk]
Exits non-zero if a result is wrong; the sanitizer reports memory errors and races.
"""

from __future__ import annotations

import sys

import torch
from _kernel import load_kernel

gk = load_kernel()
ops = gk._ops.ops
ref = gk.reference

FN, NUZ = torch.float8_e4m3fn, torch.float8_e4m3fnuz


def inputs(m, n, k, a_major, b_major, da=FN, db=FN):
    g = torch.Generator(device="cuda").manual_seed(m * 31 + n * 7 + k)
    kb, nb = -(-k // 128), -(-n // 128)
    a = torch.randn(m, k, generator=g, device="cuda")
    b = torch.randn(n, k, generator=g, device="cuda")
    a = a.to(da) if a_major == "k" else a.t().contiguous().to(da).t()
    b = b.to(db) if b_major == "k" else b.t().contiguous().to(db).t()
    sa = torch.randn(m, kb, generator=g, device="cuda")
    sb = torch.randn(nb, kb, generator=g, device="cuda")
    return a, b, sa, sb


failures = 0
checked = 0
# The kernels the op can choose by itself; "all" adds those reachable only through the
# explicit `variant` argument: the 2x1-cluster variant and the cluster split-K one. "v10"
# runs the hand-written kernel alone, on its own and on CTA pairs (variant 12); "amn" runs
# its builds that read A MN-major (13, 14) alone, on problems small enough for racecheck;
# "split" runs its split-K builds (15, 16) alone; "bf16" its BF16 build (17) alone;
# "fewrow" the few-row kernel (18; 19 in exact mode) alone; "cluster" the cluster split-K
# kernel (11) alone; "exactmn" the exact-mode
# build reading A MN-major (20, 21) alone; "exactk" the one reading A
# K-major (22, 23) alone; "all" runs all of them.
MODE = sys.argv[1] if len(sys.argv) > 1 else ""
ALL = MODE in ("all", "v10")
VARIANTS = [(0, 0), (0, 1), (0, 3), (2, 0), (7, 0), (10, 0), (3, 0), (3, 1), (3, 3), (4, 0),
            (9, 0), (17, 0)]
EXACT = (3, 4, 8, 9, 17, 19, 20, 21, 22, 23)  # the exact-mode variants
if MODE == "all":
    VARIANTS += [(1, 0), (11, 0), (11, 1), (11, 2), (11, 8), (12, 0)]
elif MODE == "v10":
    VARIANTS = [(10, 0), (12, 0)]


def check(out, a, b, sa, sb, exact, what):
    global failures, checked
    checked += 1
    r = ref.gemm_nt_reference(a, b, sa, sb)
    if exact:
        bad = ref.challenge_mismatches(out, a, b, sa, sb)
        ok = bad == 0
    else:
        ok = bool(torch.isfinite(out).all()) and ref.calc_diff(out, r) < 1e-5
    if not ok:
        failures += 1
        print(f"WRONG: {what}", flush=True)


cases = [
    (64, 128, 256, "mn", "mn"),   # transpose path, aligned
    (17, 100, 200, "mn", "k"),    # transpose tails, N padding, K padding, temp output
    (130, 576, 384, "k", "mn"),   # direct K-major A
    (33, 72, 7232, "k", "k"),     # long K, direct
]
# modes without the op's cases
ALONE = ("amn", "split", "bf16", "fewrow", "cluster", "exactmn", "exactk")
for m, n, k, am, bm in [] if MODE in ALONE else cases:
    a, b, sa, sb = inputs(m, n, k, am, bm)
    for exact in (False, True):
        check(gk.gemm_nt(a, b, sa, sb, precision="exact" if exact else "fast"), a, b, sa, sb, exact,
              f"{m}x{n}x{k} {am}/{bm} exact={exact}")
    kp = -(-k // 16) * 16
    fits = [s for s in (2, 3) if kp % (128 * s) == 0]
    split_k = [] if MODE == "v10" else [(v, s) for v in (5, 6, 8) for s in fits[:1]]
    for v, s in VARIANTS + split_k:
        exact = v in EXACT
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        ops.gemm_nt_out(out, a, b, sa, sb, exact, v, s)
        check(out, a, b, sa, sb, exact, f"{m}x{n}x{k} {am}/{bm} v{v} s{s}")

# The hand-written kernel reads its scales row-major; other layouts are copied in the
# preparation launch where K has more than four blocks, alone when the operands need no
# preparation (K-major operands with column-major scales), and read in place through
# their strides up to four blocks (K = 512 and the op's cases below). With more tiles
# than SMs, each CTA runs several tiles: its stage ring wraps, its output staging is
# reused and each epilogue overlaps the next tile's first MMAs, with an odd (17) and an
# even (16) block count.
V10 = (10, 12)
# Variants 13 and 14 read MN-major A in place (rows of K 16-byte aligned: M a multiple
# of 16 here) and B rewritten in their K order, transposed or row-copied.
AMN = (13, 14)
v10_runs = [(1100, 2100, 640, "k", "k", "row", V10), (1100, 2100, 640, "k", "k", "col", V10),
            (1100, 2100, 512, "k", "k", "col", V10), (1100, 2100, 512, "mn", "mn", "col", V10),
            (1100, 2100, 2176, "mn", "mn", "col", V10), (1100, 2100, 2048, "mn", "k", "row", V10)]
if ALL:
    v10_runs += [(*c, "col", V10) for c in cases]
if MODE == "all":
    v10_runs += [(1104, 2100, 2176, "mn", "mn", "col", AMN),
                 (1104, 2100, 2048, "mn", "k", "row", AMN),
                 (208, 100, 200, "mn", "mn", "col", AMN)]
if MODE == "amn":
    # 153 tiles on 132 SMs: some CTAs run two tiles (the stage ring wraps, the output
    # staging is reused); 5 and 4 K blocks; tails in N and K.
    v10_runs = [(1104, 2100, 640, "mn", "mn", "col", AMN), (1104, 2100, 512, "mn", "k", "row", AMN),
                (208, 100, 200, "mn", "mn", "col", AMN)]
# Split-K builds (15; 16 reads A MN-major): uneven slices (15 blocks in 4), slices of one
# block, several units per CTA (153 tiles x 2 slices on 132 SMs), tails in M, N and K.
# Entries of variants are (variant, splits) here.
SPLIT = ((15, 4), (15, 15), (16, 4), (16, 15))
split_runs = [(304, 600, 1920, "mn", "mn", "col", SPLIT), (208, 100, 200, "mn", "k", "row", SPLIT),
              (1104, 2100, 640, "mn", "mn", "col", ((15, 2), (16, 2)))]
# The BF16 build (17, exact mode): the same stage-ring wrap (3 stages), staging reuse and
# tails, with odd (5) and even (4) block counts and each K block in two sub-tiles per
# operand.
bf16_runs = [(1100, 2100, 640, "k", "k", "row", (17,)),
             (1100, 2100, 512, "mn", "mn", "col", (17,)),
             (208, 100, 200, "mn", "k", "row", (17,))]
# The few-row kernel (18; 19 converts B to FP16 in registers and A in shared memory): tails in M,
# N and K after a preparation launch, two tile rows of 128 (M = 130), uneven slices (3
# of 8 blocks), the stage ring wrapping within a unit (16 blocks) and across units (134
# tiles of 64x128 on 132 SMs).
FEWROW = ((18, 0), (18, 1), (18, 3), (19, 0), (19, 1), (19, 3))
fewrow_runs = [(17, 100, 200, "mn", "k", "row", FEWROW), (130, 576, 1024, "k", "mn", "col", FEWROW),
               (40, 300, 2048, "k", "k", "row", FEWROW),
               (64, 17152, 384, "k", "k", "row", ((18, 1), (19, 1)))]
# The cluster split-K kernel (11): clusters of 1, 2, 4 and 8 CTAs summing one tile through
# distributed shared memory, 64-row tiles (M <= 64) and 128-row ones, tails in M, N and
# K, slices of unequal length (7 blocks over 2 and 4 slices).
CLUSTER = ((11, 1), (11, 2), (11, 4), (11, 8))
cluster_runs = [(64, 384, 1024, "k", "k", "row", CLUSTER),
                (17, 200, 896, "k", "k", "col", CLUSTER[:3]),
                (130, 300, 1024, "k", "k", "row", CLUSTER)]
# The exact-mode build reading A MN-major in place (20; M a multiple of 16 for 16-byte
# aligned rows of K) and B MN-major (N too) or K-major: 153 tiles on 132 SMs (the stage
# ring and both B copies wrap, the output staging is reused), odd (5) and even (4) block
# counts, tails in N and K (a 112-column tile, K = 200; N = 2100 with B K-major), scales
# of either layout read in place. Variant 21 (20 split along K): two slices of one block
# each, uneven slices (4 of 15 blocks), slices of one block, and several units per CTA
# (153 tiles x 2 slices, 12 x 15, on 132 SMs).
exactmn_runs = [(1104, 2112, 640, "mn", "mn", "col", ((20, 0), (21, 2))),
                (1104, 2112, 512, "mn", "mn", "row", (20,)),
                (1104, 2100, 640, "mn", "k", "col", ((20, 0), (21, 2))),
                (208, 112, 200, "mn", "mn", "col", ((20, 0), (21, 2))),
                (304, 400, 1920, "mn", "mn", "col", ((21, 4), (21, 15)))]
# The same for A K-major read in place (22, 23) and B K-major or MN-major (N a multiple
# of 16 there): 153 tiles on 132 SMs, odd and even block counts, tails in M, N (2100:
# through a temporary output) and K (208: a partial block past which TMA reads zeros),
# uneven slices and slices of one block.
exactk_runs = [(1100, 2100, 640, "k", "k", "col", ((22, 0), (23, 2))),
               (1100, 2100, 512, "k", "k", "row", (22,)),
               (200, 100, 208, "k", "k", "col", ((22, 0), (23, 2))),
               (304, 400, 1920, "k", "k", "col", ((23, 4), (23, 15))),
               (1104, 2112, 640, "k", "mn", "col", ((22, 0), (23, 2))),
               (208, 112, 208, "k", "mn", "row", ((22, 0), (23, 4)))]
if MODE == "split":
    v10_runs = split_runs
elif MODE == "bf16":
    v10_runs = bf16_runs
elif MODE == "fewrow":
    v10_runs = fewrow_runs
elif MODE == "cluster":
    v10_runs = cluster_runs
elif MODE == "exactmn":
    v10_runs = exactmn_runs
elif MODE == "exactk":
    v10_runs = exactk_runs
elif MODE == "all":
    v10_runs += split_runs + bf16_runs + fewrow_runs + cluster_runs + exactmn_runs + exactk_runs
for m, n, k, am, bm, layout, variants in v10_runs:
    a, b, sa, sb = inputs(m, n, k, am, bm)
    if layout == "col":
        sa, sb = sa.t().contiguous().t(), sb.t().contiguous().t()
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    for entry in variants:
        v, s = entry if isinstance(entry, tuple) else (entry, 0)
        s = min(s, -(-k // 128))  # at most one slice per K block
        ops.gemm_nt_out(out, a, b, sa, sb, v in EXACT, v, s)
        check(out, a, b, sa, sb, v in EXACT,
              f"{m}x{n}x{k} {am}/{bm} v{v} s{s} {layout}-major scales")

a, b, sa, sb = inputs(40, 136, 300, "mn", "k", NUZ, FN)
check(gk.gemm_nt(a, b, sa, sb), a, b, sa, sb, False, "fnuz/fn")
a, b, sa, sb = inputs(40, 136, 300, "k", "mn", FN, NUZ)
check(gk.gemm_nt(a, b, sa, sb), a, b, sa, sb, False, "fn/fnuz")
x = torch.randn(77, 300, device="cuda")
for dt in (FN, NUZ):
    for f, rf in ((gk.quantize_activation, ref.quantize_activation_reference),
                  (gk.quantize_weight, ref.quantize_weight_reference)):
        q, s = f(x, dt)
        rq, rs = rf(x, dt)
        if not (torch.equal(s, rs) and torch.equal(q.view(torch.uint8), rq.view(torch.uint8))):
            failures += 1
            print(f"WRONG: quantization {dt} {f.__name__}")
torch.cuda.synchronize()
print(f"sanitize workload done: {checked} results checked, {failures} wrong")
sys.exit(1 if failures else 0)
