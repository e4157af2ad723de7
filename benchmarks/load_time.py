"""How long does get_kernel take, against the cost of ``import torch`` alone?

- import torch: a new process that only imports torch (wall time of the process).
- cold get_kernel: a new process, the kernel already in the local hub; after ``import
  torch``, the import of kernelforge and the ``get_kernel`` call itself, each timed
  apart, and the whole process.
- warm get_kernel: the same call repeated in one process (module already loaded).
- with --local DIR (a project folder holding ``build/<variant>/``): a new process's
  import of the loader and its ``get_local_kernel(DIR)`` call, timed apart, kernelforge's
  and, where it is installed, Hugging Face's ``kernels`` (the baseline: it verifies no
  digest and no signature). The imports differ most: ``kernels`` imports
  ``huggingface_hub``, kernelforge imports its hub code only when a load needs it.
- on a CUDA machine: a new process's first CUDA allocation, which a CUDA kernel's load
  pays for when its ops are registered (the floor of a cold load there).

The processes of one run are interleaved, so that a drift of the machine shows in every
row alike.

Usage: python benchmarks/load_time.py REPO_ID [--hub DIR] [--backend cpu] [--local DIR]
[--runs 7]. Prints a Markdown table; --json writes the numbers too.
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
t_import = time.perf_counter()
kw = json.loads(sys.argv[1])
mod = get_kernel(kw.pop("repo"), **kw)
t2 = time.perf_counter()
warm = []
for _ in range(1000):
    s = time.perf_counter()
    get_kernel(json.loads(sys.argv[1])["repo"], **kw)
    warm.append(time.perf_counter() - s)
warm.sort()
print(json.dumps({"import_torch": t1 - t0, "import_kernelforge": t_import - t1,
                  "cold": t2 - t_import, "warm": warm[len(warm) // 2],
                  "module": mod.__name__}))
"""


LOCAL = """
import sys, time
import torch
from pathlib import Path
t0 = time.perf_counter()
if sys.argv[1] == "kernels":
    from kernels import get_local_kernel
else:
    from kernelforge import get_local_kernel
t1 = time.perf_counter()
get_local_kernel(Path(sys.argv[2]))
print(t1 - t0, time.perf_counter() - t1)
"""

CUDA_CONTEXT = """
import time
import torch
t0 = time.perf_counter()
torch.empty(1, device="cuda")
print(time.perf_counter() - t0)
"""


def _child_seconds(code: str, *args: str) -> list[float]:
    """The numbers the last line of a new process running ``code`` prints."""
    last = _wall([sys.executable, "-c", code, *args])[1].strip().splitlines()[-1]
    return [float(word) for word in last.split()]


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


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
    parser.add_argument("--local", help="a project folder holding build/<variant>/: "
                        "also time get_local_kernel on it, kernelforge's and kernels'")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json")
    args = parser.parse_args()
    kw = {"repo": args.repo}
    if args.hub:
        kw["hub"] = args.hub
    if args.backend:
        kw["backend"] = args.backend

    import_only, proc_total, cold, warm, in_proc_import = [], [], [], [], []
    import_kernelforge: list[float] = []
    module = ""
    import torch

    loaders = ["kernelforge", *(["kernels"] if _has("kernels") else [])] if args.local else []
    local: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in loaders}
    context: list[float] = []
    for _ in range(args.runs):
        for loader, (imports, calls) in local.items():
            took_import, took_call = _child_seconds(LOCAL, loader, args.local)
            imports.append(took_import)
            calls.append(took_call)
        if torch.cuda.is_available():
            context.append(_child_seconds(CUDA_CONTEXT)[0])
        import_only.append(_wall([sys.executable, "-c", "import torch"])[0])
        elapsed, out = _wall([sys.executable, "-c", CHILD, json.dumps(kw)])
        rec = json.loads(out.strip().splitlines()[-1])
        proc_total.append(elapsed)
        cold.append(rec["cold"])
        warm.append(rec["warm"])
        in_proc_import.append(rec["import_torch"])
        import_kernelforge.append(rec["import_kernelforge"])
        module = rec["module"]

    med = statistics.median
    named = {"kernelforge": "kernelforge", "kernels": "Hugging Face's kernels"}
    rows = [
        ("process running only `import torch` (wall)", med(import_only)),
        ("`import torch` inside the get_kernel process", med(in_proc_import)),
        ("`from kernelforge import get_kernel` (new process, after import torch)",
         med(import_kernelforge)),
        ("cold `get_kernel` call (new process, kernel in local hub)", med(cold)),
        ("process: import torch + kernelforge + cold get_kernel (wall)", med(proc_total)),
        ("warm `get_kernel` call (same process, median of 1000)", med(warm)),
    ]
    for loader, (imports, calls) in local.items():
        rows += [(f"import of `get_local_kernel`, {named[loader]} (new process, after "
                  "import torch)", med(imports)),
                 (f"cold `get_local_kernel` call, {named[loader]} (new process)", med(calls))]
    if context:
        rows.append(("first CUDA allocation (new process, after import torch)", med(context)))
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    print(f"get_kernel({args.repo!r}) -> {module}; {time.strftime('%Y-%m-%d')}, {device}, "
          f"torch {torch.__version__}, Python {platform.python_version()}, "
          f"{platform.machine()}, median of {args.runs} runs")
    print("| what | time |\n| --- | --- |")
    for name, seconds in rows:
        print(f"| {name} | {seconds * 1e3:.3f} ms |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({name: seconds for name, seconds in rows}, fh, indent=2)


if __name__ == "__main__":
    main()
