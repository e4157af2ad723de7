"""What does verifying a kernel on every load cost? ms per load with and without it.

A variant is published, signed, to a private local hub under one "publisher" config and
loaded under another that trusts the key, so each load takes the full path a shared
kernel takes: revision and variant choice, the trust policy (reading the trust store and
checking the ed25519 signature over metadata.json), the digest check of every file
(against the metadata digest and the hub's record), and the import. "Verification off"
is the same call with the trust policy stubbed out and the digest check replaced by the
metadata's own digests taken unchecked (the import still hashes each module as it
compiles it), so the difference is the cost of the checks alone. Every load runs in a fresh process
(after its ``import torch``), so every load is a cold one; files are in the page cache
after the first (as they are for a kernel loaded on each process start).

Usage:
    python benchmarks/verify_cost.py                        # a small generated kernel
    python benchmarks/verify_cost.py --so-kib 2048          # ... with a larger binary
    python benchmarks/verify_cost.py --variant kernels/gemm/build/torch213-cxx11-cu129-x86_64-linux
Prints a Markdown table; --json FILE writes the numbers too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = "bench/verify-cost"


def make_small_kernel(build: Path, so_kib: int) -> Path:
    """A pure-Python package plus a binary blob (standing in for the .so; not imported)."""
    from kernelforge import digest

    vdir = build / "torch-universal"  # fits any system
    vdir.mkdir(parents=True)
    (vdir / "__init__.py").write_text("from . import _ops, layers\nfrom ._ops import ops\n")
    (vdir / "_ops.py").write_text("ops = None\n\ndef add_op_namespace_prefix(name):\n"
                                  "    return f'_bench::{name}'\n")
    (vdir / "layers.py").write_text("class ReLU:\n    def forward(self, x):\n"
                                    "        return x\n" * 20)
    (vdir / "_bench_cpu_0000001.abi3.so").write_bytes(os.urandom(so_kib * 1024))
    meta = {"name": "bench", "id": "_bench_cpu_0000001", "version": 1, "license": "MIT",
            "python-depends": [], "backend": {"type": "cpu", "archs": None},
            "digest": digest.digest_block(vdir)}
    (vdir / "metadata.json").write_text(json.dumps(meta, indent=1))
    return vdir


def copy_variant(src: Path, build: Path) -> Path:
    if not (src / "metadata.json").is_file():
        raise SystemExit(f"--variant {src}: not a build variant directory (no metadata.json)")
    dest = build / src.name
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


# One cold load in a fresh process (a kernel that registers torch ops can be imported
# only once per process). argv: hub directory, "on" or "off".
CHILD = """
import sys, time
import torch  # imported before timing: the cost of torch is not the loader's
from kernelforge import digest, loader, policy
if sys.argv[2] == "off":
    # The digests as the metadata records them, taken unchecked: the loader still
    # compiles each module from the bytes it reads, so only the checks are left out.
    digest.verify_variant = lambda path, meta, **kw: dict(meta["digest"]["files"])
    policy.evaluate = lambda req, **kw: policy.TrustDecision(True, "benchmark: off")
start = time.perf_counter()
loader.get_kernel(REPO, version=1, hub=sys.argv[1])
print((time.perf_counter() - start) * 1e3)
""".replace("REPO", repr(REPO))


def _timed_loads(hub_root: Path, runs: int, verify: bool) -> list[float]:
    out = []
    for _ in range(runs):
        mode = "on" if verify else "off"
        proc = subprocess.run([sys.executable, "-c", CHILD, str(hub_root), mode],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"a timed load failed:\n{proc.stderr}")
        out.append(float(proc.stdout.strip().splitlines()[-1]))
    return out


def measure(vdir: Path, runs: int, work: Path) -> dict[str, Any]:
    from kernelforge import digest, policy, signing, trust
    from kernelforge.hub import LocalHub
    from kernelforge.hub._staging import read_metadata

    meta = read_metadata(vdir)
    files = [p for p in vdir.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    os.environ["KERNELFORGE_CONFIG"] = str(work / "publisher")
    key = signing.generate_key(work / "publisher.pem")
    hub = LocalHub(work / "hub")
    hub.publish(REPO, vdir.parent, version=int(meta.get("version") or 1), signer=key)
    os.environ["KERNELFORGE_CONFIG"] = str(work / "user")  # not the publisher: needs the key
    trust.add_key(key.public.text, name="bench")

    _timed_loads(hub.root, 1, verify=True)  # warm up: page cache
    with_ms, without_ms = [], []
    for _ in range(runs):  # interleaved, so drift affects both alike
        with_ms += _timed_loads(hub.root, 1, verify=True)
        without_ms += _timed_loads(hub.root, 1, verify=False)

    commit = hub.resolve(REPO, "v1")
    fetched = hub.fetch_variant(REPO, commit, vdir.name)
    hash_ms, sig_ms = [], []
    sig = hub.read_file(REPO, commit, f"build/{vdir.name}.sig") or b""
    meta_bytes = (fetched.path / "metadata.json").read_bytes()
    for _ in range(runs):
        start = time.perf_counter()
        digest.verify_variant(fetched.path, meta, metadata_sha256=digest.b64_sha256(meta_bytes),
                              recorded=fetched.recorded)
        hash_ms.append((time.perf_counter() - start) * 1e3)
        start = time.perf_counter()
        req = policy.TrustRequest(REPO, vdir.name, meta_bytes, signature=sig)
        allowed = policy.evaluate(req).allowed
        sig_ms.append((time.perf_counter() - start) * 1e3)
    if not allowed:
        raise SystemExit("benchmark set-up error: the signature did not verify")
    return {
        "variant": vdir.name, "files": len(files), "bytes": size, "runs": runs,
        "load_verified_ms": statistics.median(with_ms),
        "load_unverified_ms": statistics.median(without_ms),
        "digests_ms": statistics.median(hash_ms),
        "trust_ms": statistics.median(sig_ms),
        "python": platform.python_version(), "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
    }


def table(r: dict[str, Any]) -> str:
    mib = r["bytes"] / 2**20
    cost = r["load_verified_ms"] - r["load_unverified_ms"]
    rate = mib / (r["digests_ms"] / 1e3) if r["digests_ms"] else float("inf")
    return "\n".join([
        f"variant {r['variant']}: {r['files']} files, {mib:.2f} MiB; median of {r['runs']} "
        f"cold loads (page cache warm); Python {r['python']}, {r['machine']}",
        "",
        "| | ms per load |",
        "| --- | ---: |",
        f"| get_kernel, verification on | {r['load_verified_ms']:.2f} |",
        f"| get_kernel, verification off | {r['load_unverified_ms']:.2f} |",
        f"| difference (the cost of verifying) | {cost:.2f} |",
        f"| of which: sha256 of every file, 3 records compared | {r['digests_ms']:.2f} "
        f"({rate:.0f} MiB/s) |",
        f"| of which: trust store + ed25519 signature | {r['trust_ms']:.2f} |",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", type=Path, help="a build/<variant> directory to measure")
    parser.add_argument("--so-kib", type=int, default=256,
                        help="size of the generated kernel's binary (default 256 KiB)")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", help="also write the numbers to this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kf-verify-cost-") as tmp:
        work = Path(tmp)
        build = work / "project" / "build"
        build.mkdir(parents=True)
        vdir = copy_variant(args.variant, build) if args.variant else make_small_kernel(
            build, args.so_kib)
        result = measure(vdir, args.runs, work)
    print(table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
