"""Development build of the gemm extension without the packaging step.

Builds ``torch-ext/torch_binding.cpp`` (and the CUDA sources, unless prebuilt objects
are given) with torch's extension tooling, then lays out an importable package
``<out>/pkg/gemm`` whose ``_ops.py`` loads the result. The shipped build goes through
``kernelforge build``; this only shortens the edit-run loop on a GPU machine.

    python kernels/gemm/dev/build_dev.py --out /tmp/gemmdev [--objects DIR] [--cutlass DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import tomllib

NAME = "_gemm_cuda_dev"
HERE = Path(__file__).resolve().parent
KERNEL = HERE.parent
REPO = KERNEL.parents[1]


def cuda_sources() -> list[str]:
    """The CUDA translation units, in the order build.toml lists them."""
    with open(KERNEL / "build.toml", "rb") as f:
        srcs = tomllib.load(f)["kernel"]["gemm"]["src"]
    return [Path(s).name for s in srcs if s.endswith(".cu")]


CUDA_FLAGS = [
    "-O3",
    "-DNDEBUG",
    "-DCUDA_KERNEL",
    "-std=c++17",
    "--expt-relaxed-constexpr",
    "-gencode=arch=compute_90a,code=sm_90a",
]

OPS_PY = '''import torch
torch.ops.load_library({so!r})
ops = torch.ops.{name}


def add_op_namespace_prefix(op_name: str) -> str:
    return f"{name}::{{op_name}}"
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--objects", type=Path, default=None,
                        help="prebuilt .o of the CUDA sources")
    parser.add_argument("--cutlass", type=Path, default=None, help="CUTLASS include dir")
    args = parser.parse_args()

    from torch.utils import cpp_extension

    args.out = args.out.resolve()
    build_dir = args.out / "build"
    build_dir.mkdir(parents=True, exist_ok=True)
    registration = REPO / "src" / "kernelforge" / "build" / "data"
    includes = [KERNEL / "gemm", KERNEL / "torch-ext", registration]
    sources = [KERNEL / "torch-ext" / "torch_binding.cpp"]
    cuda = cuda_sources()
    ldflags: list[str] = []
    if args.objects is not None:
        objs = [args.objects.resolve() / (Path(s).stem + ".o") for s in cuda]
        missing = [str(o) for o in objs if not o.is_file()]
        if missing:
            print(f"missing prebuilt objects: {missing}", file=sys.stderr)
            return 2
        ldflags += [str(o) for o in objs]
    else:
        if args.cutlass is None:
            print("--cutlass is needed to compile the CUDA sources", file=sys.stderr)
            return 2
        includes.append(args.cutlass)
        sources += [KERNEL / "gemm" / s for s in cuda]

    t0 = time.time()
    cpp_extension.load(
        name=NAME,
        sources=[str(s) for s in sources],
        extra_include_paths=[str(i) for i in includes],
        extra_cflags=["-O3", "-DCUDA_KERNEL"],
        extra_cuda_cflags=CUDA_FLAGS,
        extra_ldflags=ldflags,
        build_directory=str(build_dir),
        with_cuda=True,
        is_python_module=False,
        verbose=False,
    )
    so = build_dir / f"{NAME}.so"
    print(f"built {so} in {time.time() - t0:.0f} s")

    pkg = args.out / "pkg" / "gemm"
    if pkg.exists():
        shutil.rmtree(pkg)
    shutil.copytree(KERNEL / "torch-ext" / "gemm", pkg,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "_ops.py").write_text(OPS_PY.format(so=str(so), name=NAME))
    print(f"package: {pkg.parent}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
