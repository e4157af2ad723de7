"""Benchmark the gemm kernel against cuBLASLt's block-scaled FP8 path.

Per shape: our op in fast and exact mode, cuBLASLt through
``torch.nn.functional.scaled_mm`` (BlockWise1x128 x BlockWise128x128) given K-major
operands and its preferred scale layouts for free, and, for the challenge's MN-major
storage, cuBLASLt preceded by the ``.t().contiguous()`` copies it needs. Times are
medians of GPU time (L2 flushed before every call; the calls queued behind a spin
kernel, so that host time never enters them, see ``bench``), in microseconds, taken in
three interleaved rounds (the median of the rounds is reported).

    python benchmarks/gemm.py [--suite challenge|deepseek|all] [--sweep] [--out DIR]

The kernel is loaded from GEMM_KERNEL_PATH (a directory holding the ``gemm`` package)
or GEMM_KERNEL_REPO (a hub repository, through kernelforge); which build that was
(path, metadata id and version, source commit, the extension's sha256) is recorded in
the report's ``env``.

Before a shape is timed, an output of every function it times is held to the kernel's
correctness contracts (those ``tests/gpu/test_gemm.py`` checks): fast mode's calc_diff
below 1e-5, here against cuBLASLt (the challenge layout's K-major run and cuBLASLt after
the transposes too), and exact mode with no element failing the challenge's checker
against the float64 product (misses against the challenge's own float32 reference,
whose rounding nears the tolerance, are counted beside and reported). A shape that
misses one stops the run with exit status 1 and no report written: a broken build must
not produce a timing table. ``--sweep`` checks each variant's output the same way, into
a NaN-filled output, and records a wrong one instead of timing it.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

PEAK_FP8_TFLOPS = {"H100": 1979.0, "H200": 1979.0}
PEAK_BW_TBS = {"H100": 3.35, "H200": 4.8}

CHALLENGE_NK = [(1536, 7168), (3072, 1536), (576, 7168), (7168, 256), (7168, 2048),
                (4608, 7168), (7168, 2304), (512, 7168), (4096, 512)]
CHALLENGE = [(m, n, k) for m in (1024, 6144) for n, k in CHALLENGE_NK]
DEEPSEEK_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168),
               (7168, 2048)]
DEEPSEEK = [(m, n, k) for m in (64, 128, 4096) for n, k in DEEPSEEK_NK]

# Fast mode's contract (calc_diff against a float64 reference below 1e-5; cuBLASLt is
# about 2.4e-7 from it), applied against cuBLASLt's output.
FAST_LIMIT = 1e-5

FP8_VARIANTS = [(0, 0), (0, 1), (0, 2), (1, 0), (2, 0), (7, 0)]
BF16_VARIANTS = [(3, 0), (3, 1), (4, 0), (9, 0)]
# Split-K variants (K cut into slices of whole 128-blocks): FP8 ping-pong 64x128 and
# cooperative 128x128, BF16 ping-pong 64x128; each is swept over every slice count that
# tiles K exactly.
# Tile-order swizzles of the persistent schedulers (1 is CUTLASS's default, swept above).
SWIZZLE_VARIANTS = [(7, 0), (0, 0), (2, 0)]
SWIZZLES = (2, 4, 8)
SPLIT_K_VARIANTS = (5, 6)
BF16_SPLIT_K_VARIANTS = (8,)
SPLIT_K_COUNTS = (2, 3, 4, 6, 7, 8, 12, 14, 16)
# The hand-written kernels (NOTES.md's ids 10-23), each with its own choice of K slices
# (splits 0). Several read only some layouts (13, 14, 16, 20, 21: A MN-major; 22, 23:
# A K-major) and refuse the others: the sweep records the refusal.
HANDWRITTEN_FAST = (10, 11, 12, 13, 14, 15, 16, 18)
HANDWRITTEN_EXACT = (17, 19, 20, 21, 22, 23)


def split_counts(k: int) -> list[int]:
    kp = -(-k // 16) * 16
    return [s for s in SPLIT_K_COUNTS if kp % (128 * s) == 0]


def sweep_configs(k: int) -> list[tuple[bool, int, int, int]]:
    """Every kernel variant that ``--sweep`` times on a problem with this K, as
    (exact, variant, splits, swizzle); swizzle 0 is CUTLASS's default."""
    configs = [(False, v, s, 0) for v, s in FP8_VARIANTS]
    configs += [(False, v, s, 0) for v in SPLIT_K_VARIANTS for s in split_counts(k)]
    configs += [(True, v, s, 0) for v, s in BF16_VARIANTS]
    configs += [(True, v, s, 0) for v in BF16_SPLIT_K_VARIANTS for s in split_counts(k)]
    configs += [(False, v, s, z) for v, s in SWIZZLE_VARIANTS for z in SWIZZLES]
    configs += [(False, v, 0, 0) for v in HANDWRITTEN_FAST]
    configs += [(True, v, 0, 0) for v in HANDWRITTEN_EXACT]
    return configs


def load_kernel():
    # This file is named gemm.py too: keep its own folder out of the import path.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    path = os.environ.get("GEMM_KERNEL_PATH")
    if path:
        sys.path.insert(0, path)
        return importlib.import_module("gemm")
    import kernelforge

    return kernelforge.get_kernel(os.environ.get("GEMM_KERNEL_REPO", "kernels-community/gemm"))


ROUNDS = 3


def interleaved(fns: dict, rep_ms: int, rounds: int = ROUNDS,
                per_round: dict | None = None, host_us: dict | None = None) -> dict:
    """Median over `rounds` rounds of each function's time; every round times each
    function once, so that clock or thermal drift during the run affects ours and
    cuBLASLt alike instead of whichever happens to run later. The order is shuffled per
    round (seeded, so reruns repeat it): with a rotated order each function always
    followed the same one, and on long kernels at the power limit the clock a function
    inherits from its predecessor biased it (the op and the same kernel forced
    explicitly measured 892 and 838 us, NOTES.md, v21). `per_round`, if given, receives
    every function's time in each round, in round order; `host_us` each function's
    host microseconds per queued call, per round."""
    names = list(fns)
    times = {name: [] for name in names}
    for r in range(rounds):
        order = names[:]
        random.Random(r).shuffle(order)
        for name in order:
            rep = max(10, rep_ms // rounds)
            if host_us is None:
                times[name].append(bench(fns[name], rep))
            else:
                times[name].append(bench(fns[name], rep, host=host_us.setdefault(name, [])))
    if per_round is not None:
        per_round.update(times)
    return {name: sorted(t)[len(t) // 2] for name, t in times.items()}


def retime_slow_baseline(row: dict, fn, rep_ms: int, factor: float = 2.0) -> None:
    """Time cuBLASLt once more, alone, where it measured more than `factor` times our
    fast time, and keep the faster median. cuBLASLt's medians are sometimes several
    times its usual for a whole shape (64x2112x7168: 117.7 us against 25-26 in the runs
    before and after, NOTES.md, v22); this only ever lowers the baseline, against us."""
    if row["cublas_us"] > factor * row["fast_us"]:
        row["cublas_interleaved_us"] = row["cublas_us"]
        row["cublas_retimed_us"] = bench(fn, rep_ms)
        row["cublas_us"] = min(row["cublas_us"], row["cublas_retimed_us"])


# The L2 flush before every timed call: zeroing a buffer larger than any Hopper L2
# (as triton.testing.do_bench does), which also leaves the L2 full of dirty lines.
FLUSH_BYTES = 256 << 20
# Calls queued per batch behind one spin kernel, and the spin's cycles per microsecond
# (above any Hopper SM clock, so the spin lasts at least as long as asked).
BATCH = 50
SPIN_CYCLES_PER_US = 2000
_flush_buffer: torch.Tensor | None = None


class HostBoundError(RuntimeError):
    """The GPU ran out of queued work during a timed batch, so the times include host time."""


def _flush() -> torch.Tensor:
    global _flush_buffer
    if _flush_buffer is None:
        _flush_buffer = torch.empty(FLUSH_BYTES, dtype=torch.int8, device="cuda")
    return _flush_buffer


def bench(fn, rep_ms: int, host: list | None = None) -> float:
    """Median GPU time of `fn` in microseconds over about `rep_ms` ms of calls, the L2
    flushed before each.

    Each batch of calls is queued behind a spin kernel long enough to cover the host's
    time to queue the whole batch, so the GPU never waits for the host between the
    start and end events. Without that, a call whose host path takes longer than the
    flush (torch's `scaled_mm` on a slow host CPU measured twice cuBLASLt's GPU time on
    the small shapes) is timed with its host time in it. An event after the spin
    checks that the spin was still running when the last call was queued; if not, the
    batch is queued again behind a longer spin. `host`, if given, receives the host's
    microseconds per queued call (the flush and the events included; the median over
    the batches)."""
    flush = _flush()
    fn()
    torch.cuda.synchronize()
    host_us, gpu_us = _estimate(fn, flush)
    count = max(10, int(rep_ms * 1e3 / max(gpu_us, 1.0)))
    times: list[float] = []
    queued_us: list[float] = []
    spin_us = 2.0 * host_us * min(BATCH, count) + 100.0
    tries = 0
    while len(times) < count:
        size = min(BATCH, count - len(times))
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(size)]
        spun = torch.cuda.Event()
        torch.cuda._sleep(int(spin_us * SPIN_CYCLES_PER_US))
        spun.record()
        t0 = time.perf_counter()
        for start, end in events:
            flush.zero_()
            start.record()
            fn()
            end.record()
        queued_us.append((time.perf_counter() - t0) * 1e6 / size)
        late = spun.query()  # the spin is over: the GPU may have waited for the host
        torch.cuda.synchronize()
        if late:
            tries += 1
            if tries > 5:
                raise HostBoundError(
                    f"the host could not queue {size} calls within a {spin_us:.0f} us spin")
            spin_us *= 4
            continue
        times.extend(start.elapsed_time(end) * 1e3 for start, end in events)
    if host is not None:
        host.append(statistics.median(queued_us))
    # the mean of the two middle times where their number is even, as do_bench's median
    # was: the upper one alone would lean towards the slower calls
    return statistics.median(times)


def _estimate(fn, flush: torch.Tensor, calls: int = 5) -> tuple[float, float]:
    """(host us per queued call, GPU us per call and flush) over a few calls."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(calls):
        flush.zero_()
        fn()
    end.record()
    host_us = (time.perf_counter() - t0) * 1e6 / calls
    torch.cuda.synchronize()
    return host_us, start.elapsed_time(end) * 1e3 / calls


def geomean(xs):
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def floor_us(m, n, k, gpu):
    flops = 2.0 * m * n * k
    # A and B (FP8), C (bf16), A's scales (M x KB) and B's (NB x KB), float32.
    nbytes = m * k + n * k + 2 * m * n + 4 * (m + math.ceil(n / 128)) * math.ceil(k / 128)
    return max(flops / (PEAK_FP8_TFLOPS[gpu] * 1e6), nbytes / (PEAK_BW_TBS[gpu] * 1e6))


def cublas_scales(sa_kb_m: torch.Tensor, sb_nb_kb: torch.Tensor):
    """Scale tensors in the layouts torch's blockwise scaled_mm accepts on Hopper:
    a: (M, KB) with strides (1, M); b: (round_up(KB, 4), NB) with strides (1, round_up(KB, 4)),
    the rows past KB zero."""
    nb, kb = sb_nb_kb.shape
    kbp = -(-kb // 4) * 4
    padded = torch.zeros(nb, kbp, dtype=torch.float32, device=sb_nb_kb.device)
    padded[:, :kb] = sb_nb_kb
    return sa_kb_m.t(), padded.t()


def cublas_fn(a_k, b_k, sa, sb):
    from torch.nn.functional import ScalingType, scaled_mm

    return lambda: scaled_mm(a_k, b_k.t(), sa, ScalingType.BlockWise1x128, sb,
                             ScalingType.BlockWise128x128, output_dtype=torch.bfloat16)


def make_inputs(m, n, k, challenge: bool, seed: int, device: str = "cuda"):
    g = torch.Generator(device=device).manual_seed(seed)
    kb, nb = math.ceil(k / 128), math.ceil(n / 128)
    if challenge:  # storage: a (K, M), b (K, N), scales (KB, M), (KB, NB)
        a_s = (torch.randn(k, m, generator=g, device=device) * 2).to(torch.float8_e4m3fn)
        b_s = (torch.randn(k, n, generator=g, device=device) * 2).to(torch.float8_e4m3fn)
        a, b = a_s.t(), b_s.t()
    else:
        a = (torch.randn(m, k, generator=g, device=device) * 2).to(torch.float8_e4m3fn)
        b = (torch.randn(n, k, generator=g, device=device) * 2).to(torch.float8_e4m3fn)
    sa_kb_m = torch.randn(kb, m, generator=g, device=device)
    sb_nb_kb = torch.randn(nb, kb, generator=g, device=device)
    sa = sa_kb_m.t() if challenge else sa_kb_m.t().contiguous()  # (M, KB)
    sb = sb_nb_kb.t().contiguous().t() if challenge else sb_nb_kb   # (NB, KB)
    return a, b, sa, sb, sa_kb_m, sb_nb_kb


class ContractError(Exception):
    """A shape's output missed the kernel's correctness contract."""


def contract_failures(row: dict) -> list[str]:
    """What in a row's correctness record misses the contracts (empty: nothing)."""
    what = f"{row['m']}x{row['n']}x{row['k']} {row['layout']}"
    failures = []
    for key, mode in (("calc_diff_vs_cublas", "fast"),
                      ("calc_diff_kmajor_vs_cublas", "fast, K-major operands"),
                      ("calc_diff_cublas_transposed_vs_cublas",
                       "cuBLASLt after the torch transposes")):
        if key in row and not row[key] < FAST_LIMIT:  # NaN fails too
            failures.append(f"{what}: {mode} output's calc_diff against cuBLASLt is "
                            f"{row[key]:.3g}, not below the fast contract's {FAST_LIMIT:g}")
    if row.get("exact_mismatches", 0):
        failures.append(f"{what}: exact mode fails the challenge's checker on "
                        f"{row['exact_mismatches']} of {row['m'] * row['n']} elements")
    return failures


def sweep_output_error(reference, out, exact_mode, a, b, sa, sb, ref_out) -> str | None:
    """Why a swept variant's output misses its mode's contract (None: it does not): fast
    mode's calc_diff against cuBLASLt, exact mode's checker against the float64 product."""
    if exact_mode:
        misses = reference.challenge_mismatches(out, a, b, sa, sb, torch.float64)
        return f"{misses} checker misses in exact mode" if misses else None
    diff = float(reference.calc_diff(out, ref_out))
    return None if diff < FAST_LIMIT else f"calc_diff {diff:.3g} against cuBLASLt"


def run_shape(gk, m, n, k, challenge, gpu, rep, sweep):
    a, b, sa, sb, sa_kb_m, sb_nb_kb = make_inputs(m, n, k, challenge, seed=m * 7 + n * 3 + k)
    layout = "challenge (MN-major)" if challenge else "NT (K-major)"
    row = {"m": m, "n": n, "k": k, "layout": layout}
    row["floor_us"] = floor_us(m, n, k, gpu)

    fast = lambda: gk.gemm_nt(a, b, sa, sb)  # noqa: E731
    exact = lambda: gk.gemm_nt(a, b, sa, sb, precision="exact")  # noqa: E731
    a_k, b_k = a.contiguous(), b.contiguous()  # free K-major copies for cuBLASLt
    csa, csb = cublas_scales(sa_kb_m, sb_nb_kb)
    cub = cublas_fn(a_k, b_k, csa, csb)
    timed = {"fast_us": fast, "exact_us": exact, "cublas_us": cub}
    if challenge:
        from torch.nn.functional import ScalingType, scaled_mm

        def cub_t():
            return scaled_mm(a.contiguous(), b.contiguous().t(), csa, ScalingType.BlockWise1x128,
                             csb, ScalingType.BlockWise128x128, output_dtype=torch.bfloat16)

        timed["cublas_t_us"] = cub_t
        # Our GEMM alone: the same problem handed over K-major (no layout work).
        timed["fast_kmajor_us"] = lambda: gk.gemm_nt(a_k, b_k, sa, sb)

    # Correctness first, so that a broken build stops before it is timed: one output of
    # every function timed below. All of them are computed before any is checked and
    # stay alive until every check is done: the caching allocator hands a freed block
    # back, contents and all, to the next request of its size, so an output freed after
    # its check (or a reference's bf16 temporary) would stand in for a later call's
    # output that the kernel left unwritten, and that check would pass. The exact
    # checker's reference is the float64 product: the challenge's float32 one carries its
    # own rounding, about 5e-4 at K = 7168 with these inputs, half the checker's 1e-3
    # tolerance near zero, so it can miss an element that is right (one in 9.4 million
    # at 6144x1536x7168, kernels/gemm/NOTES.md v40). Misses against the float32
    # reference are recorded beside, on the challenge's shapes.
    outs = {name: fn() for name, fn in timed.items()}
    ref_out = outs["cublas_us"]
    row["calc_diff_vs_cublas"] = float(gk.reference.calc_diff(outs["fast_us"], ref_out))
    if challenge:
        row["calc_diff_kmajor_vs_cublas"] = float(
            gk.reference.calc_diff(outs["fast_kmajor_us"], ref_out))
        row["calc_diff_cublas_transposed_vs_cublas"] = float(
            gk.reference.calc_diff(outs["cublas_t_us"], ref_out))
    row["exact_mismatches"] = gk.reference.challenge_mismatches(
        outs["exact_us"], a, b, sa, sb, torch.float64)
    if challenge:
        row["exact_mismatches_f32_reference"] = gk.reference.challenge_mismatches(
            outs["exact_us"], a, b, sa, sb, torch.float32)
    del outs, ref_out
    failures = contract_failures(row)
    if failures:
        raise ContractError("; ".join(failures))

    # Which kernels the op launches (packages built before plan_nt existed lack it).
    if hasattr(gk, "plan_nt"):
        for mode in ("fast", "exact"):
            p = gk.plan_nt(a, b, sa, sb, precision=mode)
            row[f"kernel_{mode}"] = {"variant": p.variant, "splits": p.splits, "name": p.name}

    rounds: dict = {}
    host: dict = {}
    row.update(interleaved(timed, rep, per_round=rounds, host_us=host))
    row["rounds_us"] = rounds
    row["host_us"] = host
    retime_slow_baseline(row, cub, rep)
    if challenge:
        ops = gk._ops.ops
        row["prep_a_us"] = bench(lambda: ops.prepare_operand(a, False), rep)
        row["prep_b_us"] = bench(lambda: ops.prepare_operand(b, False), rep)
        row["prep_tbs"] = 2.0 * (m * k + n * k) / ((row["prep_a_us"] + row["prep_b_us"]) * 1e6)
    flops = 2.0 * m * n * k
    row["fast_tflops"] = flops / (row["fast_us"] * 1e6)
    row["exact_tflops"] = flops / (row["exact_us"] * 1e6)
    row["cublas_tflops"] = flops / (row["cublas_us"] * 1e6)
    row["ratio_fast"] = row["cublas_us"] / row["fast_us"]
    row["ratio_exact"] = row["cublas_us"] / row["exact_us"]
    if sweep:
        ops = gk._ops.ops
        ref_out = cub()
        res = {}
        for exact_mode, v, s, z in sweep_configs(k):
            def call(exact_mode=exact_mode, v=v, s=s, z=z):
                return ops.gemm_nt(a, b, sa, sb, exact_mode, v, s, z)

            key = f"v{v}s{s}" + (f"z{z}" if z else "")
            try:
                # Checked before it is timed, into an output filled with NaN: an output
                # from the caching allocator could hold an earlier call's product, which
                # would hide elements the variant leaves unwritten. The same launch path
                # as the timed call (the op's gemm_nt allocates a tensor like this one).
                out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=a.device)
                ops.gemm_nt_out(out, a, b, sa, sb, exact_mode, v, s, z)
                wrong = sweep_output_error(gk.reference, out, exact_mode, a, b, sa, sb, ref_out)
                del out
                res[key] = f"wrong output: {wrong}" if wrong else bench(call, max(10, rep // 2))
            except Exception as err:  # a variant may not implement a shape: record why
                res[key] = f"{type(err).__name__}: {str(err)[:80]}"
        row["sweep_us"] = res
    return row


def kernel_build(gk) -> dict:
    """Which build of the kernel is timed: how it was asked for, where its package is,
    the sha256 of its compiled extension, and for a kernelforge build its metadata's id,
    version and source provenance (git commit, dirty tree, source hash)."""
    # Not resolved: a local build's files may link into the sources, away from its
    # variant directory and metadata.json.
    package = Path(os.path.abspath(gk.__file__)).parent
    info: dict = {"module": gk.__name__, "path": str(package)}
    if os.environ.get("GEMM_KERNEL_PATH"):
        info["GEMM_KERNEL_PATH"] = os.environ["GEMM_KERNEL_PATH"]
    else:
        info["GEMM_KERNEL_REPO"] = os.environ.get("GEMM_KERNEL_REPO", "kernels-community/gemm")
    info["extension_sha256"] = {lib.name: hashlib.sha256(lib.read_bytes()).hexdigest()
                                for lib in sorted(package.glob("*.so"))}
    for folder in (package, package.parent):  # the variant directory holds metadata.json
        meta_path = folder / "metadata.json"
        if meta_path.is_file():
            meta = json.loads(meta_path.read_text())
            provenance = meta.get("provenance") or {}
            info["variant"] = folder.name
            info["id"] = meta.get("id")
            info["version"] = meta.get("version")
            info["source"] = provenance.get("kernel")  # {"commit", "dirty"}
            info["source_sha256"] = provenance.get("source-sha256")
            break
    else:
        info["metadata"] = "none (not a kernelforge build)"
    return info


def env_info(gk=None):
    info = {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = "missing"
    try:
        info["driver"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as err:
        info["driver"] = f"unknown ({err})"
    if gk is not None:
        info["kernel"] = kernel_build(gk)
    return info


def kernel_line(build: dict) -> str:
    """The kernel build in one line of the Markdown report."""
    where = build.get("GEMM_KERNEL_PATH") or build.get("GEMM_KERNEL_REPO")
    parts = [f"kernel {where} ({build['path']})"]
    if "id" in build:
        source = build.get("source") or {}
        parts.append(f"id {build['id']}, version {build['version']}, source commit "
                     f"{source.get('commit', 'unknown')}"
                     + (" (dirty tree)" if source.get("dirty") else ""))
    else:
        parts.append(build["metadata"])
    parts += [f"{name} sha256 {digest}" for name, digest in build["extension_sha256"].items()]
    return "; ".join(parts)


def kernel_label(plan) -> str:
    """A kernel id as NOTES.md's table numbers it, with its K slices if split ("5s4")."""
    if not plan:
        return "?"
    return f"{plan['variant']}" + (f"s{plan['splits']}" if plan["splits"] > 1 else "")


def fmt_table(rows, challenge):
    head = ["M", "N", "K", "floor", "fast", "TFLOP/s", "exact", "cuBLASLt", "ratio fast",
            "ratio exact"]
    if challenge:
        head += ["cuBLASLt+T", "ratio vs +T", "fast, K-major given", "prep TB/s"]
    head += ["kernels fast/exact"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["m"], r["n"], r["k"], f"{r['floor_us']:.1f}", f"{r['fast_us']:.1f}",
                 f"{r['fast_tflops']:.0f}", f"{r['exact_us']:.1f}", f"{r['cublas_us']:.1f}",
                 f"{r['ratio_fast']:.2f}", f"{r['ratio_exact']:.2f}"]
        if challenge:
            cells += [f"{r['cublas_t_us']:.1f}", f"{r['cublas_t_us'] / r['fast_us']:.2f}",
                      f"{r['fast_kmajor_us']:.1f}", f"{r['prep_tbs']:.2f}"]
        cells.append(" / ".join(kernel_label(r.get(f"kernel_{m}")) for m in ("fast", "exact")))
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    keys = ("floor_us", "fast_us", "exact_us", "cublas_us")
    g = {key: geomean([r[key] for r in rows]) for key in keys}
    summary = (f"geomean: floor {g['floor_us']:.1f} us, fast {g['fast_us']:.1f} us, exact "
               f"{g['exact_us']:.1f} us, cuBLASLt {g['cublas_us']:.1f} us; cuBLASLt/fast "
               f"{g['cublas_us'] / g['fast_us']:.2f}x, cuBLASLt/exact "
               f"{g['cublas_us'] / g['exact_us']:.2f}x")
    if challenge:
        gt = geomean([r["cublas_t_us"] for r in rows])
        summary += f"; (cuBLASLt+transposes)/fast {gt / g['fast_us']:.2f}x"
    retimed = [f"{r['m']}x{r['n']}x{r['k']} ({r['cublas_interleaved_us']:.1f} -> "
               f"{r['cublas_us']:.1f} us)" for r in rows if "cublas_interleaved_us" in r]
    if retimed:
        summary += ("; cuBLASLt timed again alone (over 2x our fast time in the rounds), the "
                    "faster kept: " + ", ".join(retimed))
    slower = [f"{r['m']}x{r['n']}x{r['k']}" for r in rows if r["ratio_fast"] < 1.0]
    summary += f"; fast slower than cuBLASLt on: {', '.join(slower) if slower else 'none'}"
    if challenge:
        f32 = [f"{r['m']}x{r['n']}x{r['k']} ({r['exact_mismatches_f32_reference']})"
               for r in rows if r.get("exact_mismatches_f32_reference")]
        summary += ("; exact mode: no checker miss against the float64 product; against the "
                    "challenge's float32 reference: " + (", ".join(f32) if f32 else "none"))
    return "\n".join(lines), summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=["challenge", "deepseek", "all"], default="all")
    parser.add_argument("--sweep", action="store_true",
                        help="also time every kernel variant (ids 0-23) through the op's "
                             "explicit variant argument: CUTLASS's with each split-K slice "
                             "count and tile swizzle, the hand-written ones with their own "
                             "slice choice; a variant that refuses the layout records why")
    parser.add_argument("--rep", type=int, default=100, help="ms of timed runs per measurement")
    parser.add_argument("--out", type=Path, default=None, help="directory for gemm.json / gemm.md")
    args = parser.parse_args()

    gk = load_kernel()
    name = torch.cuda.get_device_name()
    gpu = "H200" if "H200" in name else "H100"
    info = env_info(gk)
    suites = []
    if args.suite in ("challenge", "all"):
        suites.append(("challenge", CHALLENGE, True))
    if args.suite in ("deepseek", "all"):
        suites.append(("deepseek", DEEPSEEK, False))
    report = {"env": info, "suites": {}}
    env_line = ", ".join(f"{k} {v}" for k, v in info.items() if k != "kernel")
    md = [f"# gemm benchmark\n\n{env_line}\n\n{kernel_line(info['kernel'])}\n\n"
          "Times in microseconds (median, L2 flushed); ratio = "
          "cuBLASLt time / our time (> 1: we are faster). floor = max(FLOPs / peak FP8, bytes / "
          "peak bandwidth). kernels: the ids (kernels/gemm/NOTES.md) the op launched in each "
          "mode, with K slices as sN.\n"]
    for suite, shapes, challenge in suites:
        rows = []
        for m, n, k in shapes:
            try:
                row = run_shape(gk, m, n, k, challenge, gpu, args.rep, args.sweep)
            except ContractError as err:
                print(f"gemm.py: FAILED, the kernel's output is wrong: {err}. Stopped "
                      "before timing it; no report written.", file=sys.stderr, flush=True)
                return 1
            rows.append(row)
            print(json.dumps(row), flush=True)
        table, summary = fmt_table(rows, challenge)
        report["suites"][suite] = {"rows": rows, "summary": summary}
        md.append(f"## {suite}\n\n{table}\n\n{summary}\n")
        print(f"\n## {suite}\n{table}\n{summary}\n", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gemm.json").write_text(json.dumps(report, indent=1))
        (args.out / "gemm.md").write_text("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
