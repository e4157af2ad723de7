"""Interleaved timing of kernel configurations on chosen shapes (drift-resistant A/B).

    python kernels/gemm/dev/ab.py nt:4096x7168x16384 challenge:6144x576x7168 guide:1024x1536x7168

Layouts: nt (A and B K-major, row-major scales), challenge (A and B MN-major, scales
transposed views) and guide (the guide's convention with A (M, K) and B (K, N) stored
row-major: A K-major, B MN-major, scales transposed views); amn: A MN-major (a transposed
view, its scales too), B K-major; ntcs: A and B K-major, both scales column-major (A's a
transposed view, B's a column-major copy). AB_FNUZ=1 passes our kernels e4m3fnuz operands.

For each shape, the op's own choices (fast and exact), explicit (precision, variant,
splits, swizzle) configurations and cuBLASLt are timed in rounds: every round runs each
configuration once (the benchmark's `bench`: GPU time, L2 flushed), in a shuffled
order, and the table reports each configuration's median over the rounds. Clock or
thermal drift during the run then affects all configurations alike. The kernel comes
from GEMM_KERNEL_PATH or GEMM_KERNEL_REPO as for benchmarks/gemm.py.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[3]
# benchmarks/gemm.py (inputs, cuBLASLt call, timing, kernel loading) under its own name:
# "gemm" is the kernel package's.
_spec = importlib.util.spec_from_file_location("gemm_benchmark", REPO / "benchmarks" / "gemm.py")
bench_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_mod)

CONFIGS = [  # (label, exact, variant, splits, swizzle)
    ("v7 coop", False, 7, 0, 0), ("v10 overlap", False, 10, 0, 0),
    ("v12 overlap-cluster2", False, 12, 0, 0), ("v13 overlap-amn", False, 13, 0, 0),
    ("v14 overlap-amn-cluster2", False, 14, 0, 0), ("v1 coop-cluster2", False, 1, 0, 0),
    ("v11 cluster-split", False, 11, 0, 0), ("v11s1 cluster-split", False, 11, 1, 0),
    ("v11s2 cluster-split", False, 11, 2, 0), ("v11s4 cluster-split", False, 11, 4, 0),
    ("v11s8 cluster-split", False, 11, 8, 0),
    ("v0 stream-K", False, 0, 0, 0), ("v0s2 stream-K-split", False, 0, 2, 0),
    ("v0s4 stream-K-split", False, 0, 4, 0), ("v0s8 stream-K-split", False, 0, 8, 0),
    ("v2 ping-pong", False, 2, 0, 0),
] + [(f"v2z{z} ping-pong-swizzle", False, 2, 0, z) for z in (2, 4, 8)] + [
    ("v5s2 ping-pong-split", False, 5, 2, 0), ("v5s4 ping-pong-split", False, 5, 4, 0),
    ("v5s7 ping-pong-split", False, 5, 7, 0), ("v5s8 ping-pong-split", False, 5, 8, 0),
    ("v5s3 ping-pong-split", False, 5, 3, 0), ("v5s11 ping-pong-split", False, 5, 11, 0),
    ("v5s14 ping-pong-split", False, 5, 14, 0),
    ("exact v9 coop", True, 9, 0, 0), ("exact v3 stream-K", True, 3, 0, 0),
    ("exact v3 data-parallel", True, 3, 1, 0), ("exact v4 ping-pong", True, 4, 0, 0),
    ("exact v17 overlap", True, 17, 0, 0), ("exact v20 exact-mn", True, 20, 0, 0),
    ("exact v8s4 ping-pong-split", True, 8, 4, 0),
] + [(f"v15s{s} overlap-split", False, 15, s, 0) for s in (0, 2, 3, 4, 6, 8, 16)] + [
    (f"v16s{s} overlap-amn-split", False, 16, s, 0) for s in (0, 2, 3, 4, 6, 8)] + [
    (f"v18s{s} fewrow", False, 18, s, 0) for s in (0, 1, 2, 3, 4, 5, 6, 7, 8)] + [
    (f"exact v19s{s} fewrow", True, 19, s, 0) for s in (0, 1, 2, 3, 4, 7)] + [
    (f"exact v21s{s} exact-mn-split", True, 21, s, 0) for s in (0, 2, 3, 4, 6)] + [
    ("exact v22 exact-ak", True, 22, 0, 0)] + [
    (f"exact v23s{s} exact-ak-split", True, 23, s, 0) for s in (0, 2, 3, 4)]
# AB_CONFIGS="v7,v10" keeps the configurations whose label starts with one of those.
_only = [x for x in os.environ.get("AB_CONFIGS", "").split(",") if x]
if _only:
    CONFIGS = [c for c in CONFIGS if any(c[0].startswith(p + " ") for p in _only)]
ROUNDS = 7
STREAM = bool(os.environ.get("AB_STREAM"))
# AB_FNUZ=1: our calls take the operands as e4m3fnuz (the same bytes, -0 made +0, since
# 0x80 is NaN there; strides kept); cuBLASLt keeps them as e4m3fn.
FNUZ = bool(os.environ.get("AB_FNUZ"))
BASE_REPO = os.environ.get("AB_BASE_REPO")


def as_fnuz(x: torch.Tensor) -> torch.Tensor:
    bits = x.view(torch.uint8).clone()
    bits.masked_fill_(bits == 0x80, 0)
    return bits.view(torch.float8_e4m3fnuz)


def configurations(gk, m, n, k, layout, base=None):
    """(label, callable) for the op's choice, the base build's (if given), each explicit
    configuration and cuBLASLt."""
    ops = gk._ops.ops
    a, b, sa, sb, sa_kb_m, sb_nb_kb = bench_mod.make_inputs(m, n, k, layout == "challenge",
                                                            seed=m + n + k)
    if layout == "guide":
        b, sa = b.t().contiguous().t(), sa_kb_m.t()
        sb = sb_nb_kb.t().contiguous().t()
    elif layout == "amn":
        a, sa = a.t().contiguous().t(), sa_kb_m.t()
    elif layout == "ntcs":
        sa, sb = sa_kb_m.t(), sb_nb_kb.t().contiguous().t()
    csa, csb = bench_mod.cublas_scales(sa_kb_m, sb_nb_kb)
    cublas = bench_mod.cublas_fn(a.contiguous(), b.contiguous(), csa, csb)
    if FNUZ:
        a, b = as_fnuz(a), as_fnuz(b)
    fns = [("op", lambda: gk.gemm_nt(a, b, sa, sb)),
           ("op exact", lambda: gk.gemm_nt(a, b, sa, sb, precision="exact"))]
    if base is not None:
        fns.append(("base op", lambda: base.gemm_nt(a, b, sa, sb)))
    for label, e, v, s, z in CONFIGS:
        fns.append((label, lambda e=e, v=v, s=s, z=z: ops.gemm_nt(a, b, sa, sb, e, v, s, z)))
    fns.append(("cuBLASLt", cublas))
    if STREAM:  # reading B once, the few-row shapes' floor (stream_floor.py)
        from stream_floor import streaming_read

        fns.append(("read B", streaming_read(b)["8x2048"]))
    return fns


def run_or_none(label: str, fn):
    """The output of one call, or ``None`` where the configuration cannot run this
    layout or shape (our variants raise ValueError; cuBLASLt refuses some shapes, e.g.
    M not a multiple of 16, with a RuntimeError)."""
    try:
        return fn()
    except ValueError:
        return None
    except RuntimeError:
        if label != "cuBLASLt":
            raise
        return None


def main() -> int:
    gk = bench_mod.load_kernel()
    base = None
    if BASE_REPO:
        import kernelforge

        base = kernelforge.get_kernel(BASE_REPO)
    specs = sys.argv[1:] or ["nt:4096x7168x16384", "nt:4096x4096x7168"]
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}")
    labels = (["op's choice", "op's choice, exact"] + (["base op"] if base else []) +
              [c[0] for c in CONFIGS] + ["cuBLASLt"] +
              (["read B"] if STREAM else []))
    print("| shape | " + " | ".join(labels) + " |")
    print("|---" * (len(labels) + 1) + "|")
    wrong = 0
    for spec in specs:
        layout, _, dims = spec.partition(":")
        m, n, k = (int(x) for x in dims.split("x"))
        if layout not in ("nt", "challenge", "guide", "amn", "ntcs"):
            raise SystemExit(f"unknown layout {layout!r} in {spec!r}: "
                             "nt, challenge, guide, amn or ntcs")
        fns = configurations(gk, m, n, k, layout, base)
        runnable = []
        ref = None
        for label, fn in fns:  # e.g. variants 13/14 need A MN-major
            out = run_or_none(label, fn)
            if out is None:
                continue
            runnable.append((label, fn))
            # Every fast configuration must agree with the op's choice (calc_diff ~1e-6).
            if label == "op":
                ref = out.float()
            elif ref is not None and not label.startswith(("exact", "op exact", "read")):
                diff = float(gk.reference.calc_diff(out.float(), ref))
                if not diff < 1e-4:
                    wrong += 1
                    print(f"WRONG: {m}x{n}x{k} {layout} {label}: calc_diff {diff:.3g} "
                          "against the op's choice", flush=True)
        t = bench_mod.interleaved(dict(runnable), 20 * ROUNDS, ROUNDS)
        cells = [f"{t[label]:.1f}" if label in t else "-" for label, _ in fns]
        print(f"| {m}x{n}x{k} {layout} | " + " | ".join(cells) + " |", flush=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
