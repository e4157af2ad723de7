"""The gemm kernel's CUDA build under Hugging Face's `kernels` loader, on a Hopper GPU.

kernelforge promises that its builds load with Hugging Face's `kernels` package. On a
CPU the bundled relu kernel shows it (tests/test_build.py); here the flagship kernel's
CUDA variant goes through their loader's checks that only a GPU exercises (the GPU's
capability against `backend.archs`, the CUDA variant chosen for this torch) and then
computes the guide's Step 5 problem. Each case runs in a fresh interpreter, as a user's
program would, with the Hub offline.

Needs `kernels==0.17.2` importable and `kernels/gemm/build/` holding a CUDA variant
(`kernelforge build kernels/gemm`); skips with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.cuda, pytest.mark.sm90]

HF_KERNELS_VERSION = "0.17.2"
KERNEL_DIR = Path(__file__).resolve().parents[2] / "kernels" / "gemm"


@pytest.fixture(scope="module")
def cuda_variant() -> Path:
    kernels = pytest.importorskip("kernels", reason=f"needs kernels=={HF_KERNELS_VERSION}")
    if getattr(kernels, "__version__", None) != HF_KERNELS_VERSION:
        pytest.skip(f"needs kernels=={HF_KERNELS_VERSION}, found "
                    f"{getattr(kernels, '__version__', 'the repository folder')}")
    build = KERNEL_DIR / "build"
    found = sorted(p for p in build.glob("*-cu*-*") if (p / "metadata.json").is_file())
    if not found:
        pytest.skip(f"no CUDA variant under {build}; run `kernelforge build kernels/gemm`")
    return found[-1]


def run(loader: str, **env: str) -> str:
    """Run ``loader`` (which binds ``gemm``), then CHECK, in a fresh interpreter."""
    script = textwrap.dedent(loader) + textwrap.dedent(CHECK)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True,
        timeout=600, env=dict(os.environ, HF_HUB_OFFLINE="1", **env), cwd=KERNEL_DIR)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


# The lines after the loader: the guide's Step 5 problem (e4m3fnuz, its storage layout,
# unit scales), then random per-block scales in the NT convention, each checked against
# the package's float64 reference in both precision modes.
CHECK = """
    import torch
    ref = gemm.reference
    M, N, K = 1024, 1536, 7168
    A = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fnuz)
    B = torch.randn(K, N, device="cuda").to(torch.float8_e4m3fnuz)
    sa = torch.ones(K // 128, M, device="cuda")
    sb = torch.ones(K // 128, N // 128, device="cuda")
    C = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    out = gemm.gemm(A, B, sa, sb, C)
    want = ref.gemm_reference(A, B, sa, sb)
    fast = ref.calc_diff(out, want)
    exact = gemm.gemm(A, B, sa, sb, precision="exact")
    bad = ref.challenge_mismatches(exact, A, B.t(), sa.t(), sb.t())
    assert out is C and fast < 1e-5 and bad == 0, (fast, bad)

    m, n, k = 200, 576, 1000
    a = torch.randn(m, k, device="cuda")
    w = torch.randn(n, k, device="cuda")
    qa, qsa = gemm.quantize_activation(a)
    qw, qsw = gemm.quantize_weight(w)
    got = gemm.gemm_nt(qa, qw, qsa, qsw)
    want = ref.gemm_nt_reference(qa, qw, qsa, qsw)
    nt = ref.calc_diff(got, want)
    assert got.shape == (m, n) and nt < 1e-5, nt
    print(f"CHECKED fast {fast:.3g} exact-mismatches {bad} nt {nt:.3g}")
"""


def test_hugging_face_get_local_kernel_loads_the_variant_kernelforge_picks(
        cuda_variant: Path) -> None:
    """Their `get_local_kernel` on the project and ours pick the same CUDA variant, ours
    reuses the module theirs imported (one copy of the ops), and it computes correctly."""
    out = run(f"""
        from pathlib import Path
        import kernels, kernelforge
        gemm = kernels.get_local_kernel(Path({str(KERNEL_DIR)!r}))
        ours = kernelforge.get_local_kernel(Path({str(KERNEL_DIR)!r}))
        print("THEIRS", Path(gemm.__file__).parent.name, gemm.__name__)
        print("OURS", Path(ours.__file__).parent.name, ours.__name__)
        assert ours is gemm
    """)
    meta = json.loads((cuda_variant / "metadata.json").read_text())
    assert f"THEIRS {cuda_variant.name} {meta['id']}" in out, out
    assert f"OURS {cuda_variant.name} {meta['id']}" in out, out
    assert "CHECKED" in out, out


def test_step5_with_hugging_face_get_kernel_and_local_kernels(cuda_variant: Path) -> None:
    """The guide's loader line unchanged (`from kernels import get_kernel`), the repository
    mapped to the build by their LOCAL_KERNELS variable, as a user trying a build would."""
    out = run("""
        from pathlib import Path
        from kernels import get_kernel
        gemm = get_kernel("kernels-community/gemm", version=1)
        print("LOADED", Path(gemm.__file__).parent.name)
    """, LOCAL_KERNELS=f"kernels-community/gemm={KERNEL_DIR}")
    assert f"LOADED {cuda_variant.name}" in out, out
    assert "CHECKED" in out, out
