"""The gemm op's kernel choice for both Hopper GPUs, without one.

``kernels/gemm/torch-ext/kernel_choice.h`` holds ``pick_variant``, a pure function of the
problem's shape, the operands' traits, the SM count and the memory bandwidth. It is
compiled here with a small driver and asked the rows of ``gemm_choice_table`` (which
``tests/gpu/test_gemm.py`` asks the built op on the GPU at hand) for the H100's
bandwidth and the H200's alike, so that a rule changed for one GPU is checked for the
other too on every run. Needs a C++ compiler and the CUDA runtime headers (the kernel's
API header includes them), and skips without them.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from gemm_choice_table import EXACT_BY_BANDWIDTH, FAST_BY_BANDWIDTH

GEMM = Path(__file__).resolve().parents[1] / "kernels" / "gemm"
H100_GBS, H200_GBS = 3352, 4800  # GB/s, either side of the rules' 4 TB/s line
SMS = 132

DRIVER = r"""
#include <cstdio>
#include "kernel_choice.h"

int main() {
  long long m, n, k;
  int gbs, exact, fn, a_mn, amn_ok, ak_ok, b_k, in_place, scales_rm;
  while (std::scanf("%lld %lld %lld %d %d %d %d %d %d %d %d %d", &m, &n, &k, &gbs, &exact,
                    &fn, &a_mn, &amn_ok, &ak_ok, &b_k, &in_place, &scales_rm) == 12) {
    kfgemm_choice::Traits t{};
    t.exact = exact; t.fn_operands = fn; t.a_mn = a_mn; t.amn_ok = amn_ok;
    t.ak_ok = ak_ok; t.b_k = b_k; t.in_place = in_place; t.scales_rm = scales_rm;
    const kfgemm_choice::Choice c = kfgemm_choice::pick_variant(m, n, k, t, SMS, gbs);
    std::printf("%d %d\n", static_cast<int>(c.variant), c.splits);
  }
  return 0;
}
"""


@dataclass(frozen=True)
class Traits:
    """``Traits`` as the binding's ``traits_of`` reads them off e4m3fn tensors."""

    exact: bool
    a_mn: bool
    amn_ok: bool
    ak_ok: bool
    b_k: bool
    in_place: bool
    scales_rm: bool

    def line(self, m: int, n: int, k: int, gbs: int) -> str:
        flags = (self.exact, True, self.a_mn, self.amn_ok, self.ak_ok, self.b_k, self.in_place,
                 self.scales_rm)
        return " ".join(map(str, (m, n, k, gbs, *map(int, flags))))


def traits(m: int, n: int, k: int, layout: str, exact: bool) -> Traits:
    """What ``traits_of`` sees for the tensors the GPU tests' ``layout_inputs`` make
    (tightly packed storage): ``mn_major_ok`` wants more than one row and a 16-byte
    multiple of them, ``k_major_ok`` K a multiple of 16, ``fp8_in_place`` also N a
    multiple of 8 for B, and the hand-written kernels read column-major scales in place
    only with at most four blocks of K (``scales_in_place``). Scales count as row-major
    (``scales_row_major``) when stored so or with one block of K (or, for A's, one row;
    for B's, one block of N)."""
    if k % 16:
        raise ValueError(f"K = {k}: the table's shapes keep K a multiple of 16")
    kb, nb = math.ceil(k / 128), math.ceil(n / 128)
    a_mn_major = layout == "challenge"
    b_mn_major = layout in ("challenge", "guide")
    a_mn_ok = a_mn_major and m > 1 and m % 16 == 0
    b_mn_ok = b_mn_major and n > 1 and n % 16 == 0
    a_k_ok, b_k_ok = not a_mn_major, not b_mn_major
    col_scales = layout != "nt"
    sa_ok = not col_scales or kb <= 4 or m == 1 or kb == 1
    sb_ok = not col_scales or kb <= 4 or nb == 1 or kb == 1
    operands_in_place = a_k_ok and b_k_ok and n % 8 == 0
    sa_rm = not col_scales or kb == 1 or m == 1
    sb_rm = not col_scales or kb == 1 or nb == 1
    return Traits(
        exact=exact,
        a_mn=not exact and a_mn_ok,
        amn_ok=a_mn_ok and (b_mn_ok or b_k_ok),
        ak_ok=a_k_ok and (b_k_ok or b_mn_ok),
        b_k=b_k_ok,
        in_place=not exact and operands_in_place and sa_ok and sb_ok,
        scales_rm=sa_rm and sb_rm,
    )


def variant_names() -> list[str]:
    """Kernel names in the order of ``enum class Variant`` (the dispatch table follows it,
    which tests/test_gemm_variant_table.py checks)."""
    text = (GEMM / "gemm" / "gemm_dispatch.cu").read_text()
    body = text[text.index("constexpr Entry kTable[]"):]
    return re.findall(r"KFGEMM_ENTRY\((\w+)\)", body[: body.index("};")])


def cuda_include() -> Path | None:
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "include" / "cuda_runtime_api.h").is_file():
            return Path(root) / "include"
    return None


@pytest.fixture(scope="module")
def choose(tmp_path_factory):
    """``choose(lines)``: pick_variant's (variant, splits) for each driver input line."""
    cxx = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("g++")
    include = cuda_include()
    if cxx is None or include is None:
        pytest.skip("needs a C++ compiler and the CUDA runtime headers (CUDA_HOME)")
    work = tmp_path_factory.mktemp("kernel_choice")
    (work / "driver.cpp").write_text(f"#define SMS {SMS}\n" + DRIVER)
    exe = work / "driver"
    subprocess.run([cxx, "-std=c++17", "-Wall", "-Werror", "-o", str(exe), str(work / "driver.cpp"),
                    f"-I{GEMM / 'torch-ext'}", f"-I{include}"], check=True, capture_output=True,
                   text=True, timeout=120)

    def run(lines: list[str]) -> list[tuple[int, int]]:
        out = subprocess.run([str(exe)], input="\n".join(lines) + "\n", check=True,
                             capture_output=True, text=True, timeout=60).stdout.split("\n")
        return [(int(v), int(s)) for v, s in (row.split() for row in out if row)]

    return run


@pytest.mark.parametrize("exact, table", [(True, EXACT_BY_BANDWIDTH),
                                          (False, FAST_BY_BANDWIDTH)], ids=["exact", "fast"])
def test_the_choice_table_holds_for_both_gpus(choose, exact, table) -> None:
    names = variant_names()
    lines, want = [], []
    for m, n, k, layout, below_4tbs, from_4tbs in table:
        t = traits(m, n, k, layout, exact)
        for gbs, name in ((H100_GBS, below_4tbs), (H200_GBS, from_4tbs)):
            lines.append(t.line(m, n, k, gbs))
            want.append((f"{m}x{n}x{k} {layout} at {gbs} GB/s", name))
    got = choose(lines)
    wrong = [f"{case}: {names[v]}, the table says {name}"
             for (case, name), (v, _) in zip(want, got, strict=True) if names[v] != name]
    assert not wrong, "\n".join(wrong)


def test_the_driver_answers_for_what_it_is_asked(choose) -> None:
    """A change of the bandwidth alone moves a choice the table says moves (so the driver
    passes its inputs through), and the few-row split-K kernels report their slices."""
    names = variant_names()
    nt = traits(128, 24576, 512, "nt", exact=False)
    (h100, _), (h200, _) = choose([nt.line(128, 24576, 512, H100_GBS),
                                   nt.line(128, 24576, 512, H200_GBS)])
    assert (names[h100], names[h200]) == ("fp8_coop_128x128_overlap", "fp8_pingpong_64x128")
    (v, splits), = choose([traits(64, 4096, 4096, "nt", False).line(64, 4096, 4096, H100_GBS)])
    assert names[v] == "fp8_pingpong_64x128_splitk" and splits >= 2


def test_traits_follow_the_layouts() -> None:
    assert traits(4096, 7168, 2048, "nt", False) == Traits(False, False, False, True, True, True,
                                                          True)
    assert traits(4096, 7168, 2048, "nt", True).in_place is False
    assert traits(6144, 3072, 1536, "challenge", False) == Traits(False, True, True, False,
                                                                  False, False, False)
    assert traits(4096, 2112, 7168, "guide", True) == Traits(True, False, False, True, False,
                                                             False, False)
    assert traits(128, 32768, 512, "nt_cs", False).in_place is True
    assert traits(128, 32768, 512, "nt_cs", False).scales_rm is False
    assert traits(128, 32768, 128, "nt_cs", False).scales_rm is True  # one block of K
    assert traits(80, 32768, 1024, "nt_cs", False).in_place is False
    with pytest.raises(ValueError, match="multiple of 16"):
        traits(64, 64, 200, "nt", False)


def test_traits_follow_the_bindings_rules_beyond_the_tables_rows() -> None:
    """Each of traits_of's conditions, where the table's rows do not reach it (so a row
    added there is read as the binding reads it): an MN-major operand needs a 16-byte
    multiple of rows (mn_major_ok), B read in place N a multiple of 8 (fp8_in_place of
    round_up(N, 8) rows), and column-major scales with more than four blocks of K are
    copied, for A and for B each (scales_in_place), unless one block of rows or of K
    makes them row-major."""
    assert traits(6152, 3072, 1536, "challenge", False).a_mn is False
    assert traits(6144, 3080, 1536, "challenge", False).amn_ok is False  # B neither way
    assert traits(6144, 3076, 1536, "nt", False).in_place is False
    assert traits(6144, 3080, 1536, "nt", False).in_place is True
    # B's scales alone in place (one block of N): A's, over eight blocks of K, are copied
    assert traits(4096, 128, 1024, "nt_cs", False).in_place is False
    # A's scales alone in place (one row): B's are copied
    assert traits(1, 4096, 1024, "nt_cs", False).in_place is False
    assert traits(1, 128, 1024, "nt_cs", False).in_place is True
    assert traits(4096, 4096, 128, "nt_cs", False).in_place is True  # one block of K
