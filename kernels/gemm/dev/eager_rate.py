"""Calls per second in an eager loop: the pace of back-to-back calls, host and GPU together.

    AB_CONFIGS="v5s4,v11s4" python kernels/gemm/dev/eager_rate.py nt:64x2112x7168 ...

The benchmark times the GPU alone (L2 flushed, median of single calls). A model run
eagerly calls one GEMM after another without waiting for them, so a call costs the
larger of its host time (argument checks, allocations, launches) and its GPU time, and
a path with two launches can be host-bound where the GPU is not. Per shape and
configuration (the op's choice, ab.py's explicit configurations filtered by
``AB_CONFIGS``, cuBLASLt given K-major operands), in interleaved rounds:

- ``loop``: microseconds per call over CALLS back-to-back calls, no synchronisation
  between them, each call on the next of several input sets whose operands together
  exceed the L2, so that every call reads its B from memory as a model's layers do;
- ``host``: host microseconds per call with the calls queued behind a long GPU sleep
  (host_gap.py), the floor the loop cannot go under;
- ``graph``: microseconds per call of the same back-to-back calls captured in a CUDA
  graph and replayed, the GPU's pace with no host in the way (each kernel follows the
  previous call's, as in a captured decoding step).

``AB_BASE_REPO`` adds the op of another build ("base op"), as in ab.py.
"""

from __future__ import annotations

import importlib.util
import random
import statistics
import sys
import time
from pathlib import Path

import torch

_here = Path(__file__).resolve().parent


def _load(name: str, file: str):
    spec = importlib.util.spec_from_file_location(name, _here / file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ab = _load("gemm_ab", "ab.py")  # configurations(), AB_CONFIGS filtering, input layouts
host_gap = _load("host_gap", "host_gap.py")
bench_mod = ab.bench_mod

CALLS = 400
ROUNDS = 5
OPERAND_BYTES = 256 * 2**20  # input sets until their operands pass this (the L2: 50-60 MB)


def loop_us(fns, calls: int = CALLS) -> float:
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(calls):
        fns[i % len(fns)]()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def graph_us(fns, calls: int = CALLS, replays: int = 5) -> float:
    for fn in fns:  # warm-up outside the capture (workspaces, lazy initialisation)
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fns[i % len(fns)]()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    del graph
    return start.elapsed_time(end) * 1e3 / (replays * calls)


def main() -> int:
    gk = bench_mod.load_kernel()
    base = None
    if ab.BASE_REPO:
        import kernelforge

        base = kernelforge.get_kernel(ab.BASE_REPO)
    specs = sys.argv[1:] or ["nt:64x2112x7168", "nt:64x32768x512"]
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| shape | configuration | loop us/call | host us/call | graph us/call |")
    print("|---|---|---|---|---|")
    for spec in specs:
        layout, _, dims = spec.partition(":")
        m, n, k = (int(x) for x in dims.split("x"))
        per_set = m * k + n * k
        sets = [ab.configurations(gk, m, n, k, layout, base)
                for _ in range(max(2, -(-OPERAND_BYTES // per_set)))]
        runnable: dict[str, list] = {}
        for i, (label, _) in enumerate(sets[0]):
            if label.startswith(("exact", "op exact")):
                continue
            fns = [s[i][1] for s in sets]
            if ab.run_or_none(label, fns[0]) is not None:
                runnable[label] = fns
        loops: dict[str, list[float]] = {label: [] for label in runnable}
        hosts: dict[str, list[float]] = {label: [] for label in runnable}
        graphs: dict[str, list[float]] = {label: [] for label in runnable}
        for _ in range(ROUNDS):
            order = list(runnable)
            random.shuffle(order)
            for label in order:
                loops[label].append(loop_us(runnable[label]))
                hosts[label].append(host_gap.host_us(runnable[label][0], 100))
                graphs[label].append(graph_us(runnable[label]))
        for label in runnable:
            print(f"| {m}x{n}x{k} {layout} | {label} | {statistics.median(loops[label]):.1f} | "
                  f"{statistics.median(hosts[label]):.1f} | "
                  f"{statistics.median(graphs[label]):.1f} |", flush=True)
        del sets, runnable
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
