"""How long does get_kernel take, against the cost of ``import torch`` alone?

- import torch: a new process that only imports torch (wall time of the process).
- cold get_kernel: a new process, the kernel already in the local hub; the time of the
  ``get_kernel`` call itself (after ``import torch``), and the whole process.
- warm get_kernel: the same call repeated in one process (module already loaded).

Usage: python benchmarks/load_time.py REPO_ID [--hub DIR] [--backend cpu] [--runs 7]
Prints a Markdown table; --json writes the numbers too.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time

CHILD = """
import sys, time, json
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
from kernelforge import get_kernel
kw = json.loads(sys.argv[1])
mod = get_kernel(kw.pop("repo"), **kw)
t2 = time.perf_counter()
warm = []
for _ in range(1000):
    s = time.perf_counter()
    get_kernel(json.loads(sys.argv[1])["repo"], **kw)
    warm.append(time.perf_counter() - s)
warm.sort()
print(json.dumps({"import_torch": t1 - t0, "cold": t2 - t1, "warm": warm[len(warm) // 2],
                  "module": mod.__name__}))
"""


def _wall(cmd: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} failed:\n{proc.stderr}")
    return elapsed, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo")
    parser.add_argument("--hub")
    parser.add_argument("--backend")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json")
    args = parser.parse_args()
    kw = {"repo": args.repo}
    if args.hub:
        kw["hub"] = args.hub
    if args.backend:
        kw["backend"] = args.backend

    import_only, proc_total, cold, warm, in_proc_import = [], [], [], [], []
    module = ""
    for _ in range(args.runs):
        import_only.append(_wall([sys.executable, "-c", "import torch"])[0])
        elapsed, out = _wall([sys.executable, "-c", CHILD, json.dumps(kw)])
        rec = json.loads(out.strip().splitlines()[-1])
        proc_total.append(elapsed)
        cold.append(rec["cold"])
        warm.append(rec["warm"])
        in_proc_import.append(rec["import_torch"])
        module = rec["module"]

    med = statistics.median
    import torch

    rows = [
        ("process running only `import torch` (wall)", med(import_only)),
        ("`import torch` inside the get_kernel process", med(in_proc_import)),
        ("cold `get_kernel` call (new process, kernel in local hub)", med(cold)),
        ("process: import torch + cold get_kernel (wall)", med(proc_total)),
        ("warm `get_kernel` call (same process, median of 1000)", med(warm)),
    ]
    print(f"get_kernel({args.repo!r}) -> {module}; torch {torch.__version__}, "
          f"Python {platform.python_version()}, {platform.machine()}, median of {args.runs} runs")
    print("| what | time |\n| --- | --- |")
    for name, seconds in rows:
        print(f"| {name} | {seconds * 1e3:.3f} ms |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({name: seconds for name, seconds in rows}, fh, indent=2)


if __name__ == "__main__":
    main()
