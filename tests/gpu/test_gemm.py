"""Numerical and integration tests of the gemm kernel on a Hopper GPU.

Every case draws fresh random inputs (the seed is in the failure message), poisons the
output first, and compares with the package's pure-torch float64 reference:
``precision="fast"`` must reach ``calc_diff < 1e-5``; ``precision="exact"`` must pass the
challenge's elementwise checker with zero mismatches.
"""

from __future__ import annotations

import math
import random
import threading

import pytest
from gemm_choice_table import EXACT_BY_BANDWIDTH, FAST_BY_BANDWIDTH

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.cuda, pytest.mark.sm90]

FN = torch.float8_e4m3fn
NUZ = torch.float8_e4m3fnuz
FAST_LIMIT = 1e-5

CHALLENGE_TEST = [
    (64, 64, 128), (64, 1536, 7168), (64, 3072, 1536), (64, 576, 7168), (96, 7168, 256),
    (96, 7168, 2048), (96, 4608, 7168), (128, 7168, 2304), (128, 512, 7168), (512, 4096, 512),
    (512, 1536, 7168),
]
CHALLENGE_NK = [(1536, 7168), (3072, 1536), (576, 7168), (7168, 256), (7168, 2048),
                (4608, 7168), (7168, 2304), (512, 7168), (4096, 512)]
CHALLENGE_BENCH = [(m, n, k) for m in (1024, 6144) for n, k in CHALLENGE_NK]
DEEPSEEK_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168),
               (7168, 2048)]
DEEPSEEK = [(m, n, k) for m in (64, 128, 4096) for n, k in DEEPSEEK_NK]
ODD = [(m, n, k) for m in (1, 17, 255) for n in (100, 576) for k in (128, 200, 7168 + 64)]


def fresh_seed() -> int:
    return random.SystemRandom().randrange(2**31)


def make_fp8(rows: int, cols: int, dtype, major: str, g) -> torch.Tensor:
    """(rows, cols) FP8 view; ``major="k"``: cols contiguous, ``"mn"``: rows contiguous.
    Values are ``randn`` cast to FP8, scales ``randn``: the challenge's distribution."""
    x = torch.randn(rows, cols, generator=g, device="cuda")
    if major == "k":
        return x.to(dtype)
    return x.t().contiguous().to(dtype).t()


def make_scale(rows: int, cols: int, layout: str, g) -> torch.Tensor:
    """(rows, cols) float32 scales; ``"row"``: contiguous, ``"col"``: a transposed view."""
    s = torch.randn(rows, cols, generator=g, device="cuda")
    return s if layout == "row" else s.t().contiguous().t()


def make_nt(m, n, k, *, seed, a_major="k", b_major="k", dtype_a=FN, dtype_b=FN,
            sa_layout="row", sb_layout="row"):
    g = torch.Generator(device="cuda").manual_seed(seed)
    kb, nb = math.ceil(k / 128), math.ceil(n / 128)
    a = make_fp8(m, k, dtype_a, a_major, g)
    b = make_fp8(n, k, dtype_b, b_major, g)
    sa = make_scale(m, kb, sa_layout, g)
    sb = make_scale(nb, kb, sb_layout, g)
    return a, b, sa, sb


def poisoned(m, n):
    return torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")


def repeat_bitwise(ops, a, b, sa, sb, exact, variant, splits, launches):
    """Runs an explicit configuration once, then ``launches`` times more with up to eight
    in flight between comparisons; returns the first output and how many of the later
    ones differ from it in any bit."""
    first = ops.gemm_nt(a, b, sa, sb, exact, variant, splits)
    outs = [torch.empty_like(first) for _ in range(min(launches, 8))]
    differing = 0
    for start in range(0, launches, len(outs)):
        batch = outs[: launches - start]
        for out in batch:
            ops.gemm_nt_out(out, a, b, sa, sb, exact, variant, splits)
        differing += sum(not torch.equal(o.view(torch.int16), first.view(torch.int16))
                         for o in batch)
    return first, differing


class Checker:
    """Float64 reference of one problem, reused across precisions and conventions."""

    def __init__(self, gemm_kernel, a, b, sa, sb, what, challenge=False):
        # The challenge's checker compares with a float32 reference; off the challenge's
        # shapes (K up to 16384) that reference's own rounding reaches the checker's
        # 1e-3 tolerance near zero, so the float64 reference stands in there.
        self.ref_dtype = torch.float32 if challenge else torch.float64
        self.k = gemm_kernel
        self.a, self.b, self.sa, self.sb = a, b, sa, sb
        self.what = what
        self.ref = gemm_kernel.reference.gemm_nt_reference(a, b, sa, sb)

    def fast(self, out):
        assert torch.isfinite(out).all(), f"non-finite output ({self.what})"
        d = self.k.reference.calc_diff(out, self.ref)
        assert d < FAST_LIMIT, f"calc_diff {d:.3g} >= {FAST_LIMIT} ({self.what})"

    def exact(self, out):
        bad = self.k.reference.challenge_mismatches(out, self.a, self.b, self.sa, self.sb,
                                                    self.ref_dtype)
        assert bad == 0, f"{bad} mismatches of {out.numel()} ({self.what})"


@pytest.mark.parametrize("m,n,k", CHALLENGE_TEST + CHALLENGE_BENCH)
def test_challenge_shapes(gemm_kernel, m, n, k):
    """The challenge's storage: A (K, M), B (K, N), scales (KB, M), (KB, NB)."""
    seed = fresh_seed()
    a, b, sa, sb = make_nt(m, n, k, seed=seed, a_major="mn", b_major="mn",
                           sa_layout="col", sb_layout="col")
    c = Checker(gemm_kernel, a, b, sa, sb, f"{m}x{n}x{k} seed={seed}", challenge=True)
    out = poisoned(m, n)
    # The guide's convention on the challenge's storage: b (K, N) is the buffer itself.
    gemm_kernel.gemm(a, b.t(), sa.t(), sb.t(), out)
    c.fast(out)
    out = poisoned(m, n)
    gemm_kernel.gemm_nt(a, b, sa, sb, out, precision="exact")
    c.exact(out)


def check_op_nt(gemm_kernel, m, n, k):
    """The op's own choice in both modes on an NT problem with fresh inputs."""
    seed = fresh_seed()
    a, b, sa, sb = make_nt(m, n, k, seed=seed)
    c = Checker(gemm_kernel, a, b, sa, sb, f"{m}x{n}x{k} seed={seed}")
    c.fast(gemm_kernel.gemm_nt(a, b, sa, sb))
    out = poisoned(m, n)
    gemm_kernel.gemm_nt(a, b, sa, sb, out, precision="exact")
    c.exact(out)


@pytest.mark.parametrize("m,n,k", DEEPSEEK)
def test_deepseek_shapes(gemm_kernel, m, n, k):
    check_op_nt(gemm_kernel, m, n, k)


@pytest.mark.parametrize("a_major,b_major", [("k", "k"), ("k", "mn"), ("mn", "k"), ("mn", "mn")])
@pytest.mark.parametrize("m,n,k", ODD)
def test_odd_shapes_every_layout(gemm_kernel, m, n, k, a_major, b_major):
    seed = fresh_seed()
    a, b, sa, sb = make_nt(m, n, k, seed=seed, a_major=a_major, b_major=b_major,
                           sa_layout=random.choice(["row", "col"]),
                           sb_layout=random.choice(["row", "col"]))
    c = Checker(gemm_kernel, a, b, sa, sb, f"{m}x{n}x{k} {a_major}/{b_major} seed={seed}")
    for precision, check in (("fast", c.fast), ("exact", c.exact)):
        out = poisoned(m, n)
        gemm_kernel.gemm_nt(a, b, sa, sb, out, precision=precision)
        check(out)


def with_special_patterns(x: torch.Tensor, g) -> torch.Tensor:
    """Plant the extreme finite patterns (0x7E/0xFE, fnuz's 0x7F/0xFF = +-240, tiny
    subnormals) into an FP8 tensor, keeping its strides."""
    bits = x.view(torch.uint8)
    specials = [0x7E, 0xFE, 0x01, 0x81]
    if x.dtype == NUZ:
        specials += [0x7F, 0xFF]
    flat_idx = torch.randint(0, x.numel(), (64,), generator=g, device=x.device)
    vals = torch.tensor(specials, dtype=torch.uint8, device=x.device)
    vals = vals[torch.randint(0, len(specials), (64,), generator=g, device=x.device)]
    rows, cols = flat_idx // x.shape[1], flat_idx % x.shape[1]
    bits[rows, cols] = vals
    return x


@pytest.mark.parametrize("dtype_a,dtype_b", [(FN, FN), (NUZ, NUZ), (NUZ, FN), (FN, NUZ)])
@pytest.mark.parametrize("major", ["k", "mn"])
def test_fp8_types(gemm_kernel, dtype_a, dtype_b, major):
    m, n, k = 255, 576, 1000
    seed = fresh_seed()
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    a, b, sa, sb = make_nt(m, n, k, seed=seed, a_major=major, b_major=major,
                           dtype_a=dtype_a, dtype_b=dtype_b)
    a, b = with_special_patterns(a, g), with_special_patterns(b, g)
    c = Checker(gemm_kernel, a, b, sa, sb, f"{dtype_a}/{dtype_b} {major} seed={seed}")
    for precision, check in (("fast", c.fast), ("exact", c.exact)):
        out = poisoned(m, n)
        gemm_kernel.gemm_nt(a, b, sa, sb, out, precision=precision)
        check(out)


def test_fnuz_values_are_half_of_fn_bits(gemm_kernel):
    """fnuz(bits) == fn(bits) / 2 for every finite pair; 0x80 NaN; 0x7F/0xFF = +-240."""
    bits = torch.arange(256, dtype=torch.uint8, device="cuda")
    fn = gemm_kernel.reference.fp8_to_float64(bits.view(FN))
    nuz = gemm_kernel.reference.fp8_to_float64(bits.view(NUZ))
    both = torch.isfinite(fn) & torch.isfinite(nuz)
    assert torch.equal(nuz[both], fn[both] / 2)
    assert math.isnan(nuz[0x80]) and nuz[0x7F] == 240 and nuz[0xFF] == -240
    # torch's own decoding agrees with the table.
    assert torch.equal(bits.view(NUZ).double()[both], nuz[both])
    assert torch.equal(bits.view(FN).double()[both], fn[both])


@pytest.mark.parametrize("major", ["k", "mn", "strided"])
@pytest.mark.parametrize("k", [256, 200])
def test_fnuz_reencoded_as_fn_like_torch(gemm_kernel, major, k):
    """Fast mode's operand pass writes e4m3fnuz operands as the e4m3fn bytes torch's
    fnuz -> float -> fn cast gives (every byte value, each path of the pass: row copy,
    transpose, gathered strides), NaN kept, the K padding zero."""
    rows = 48
    g = torch.Generator(device="cuda").manual_seed(fresh_seed())
    bits = torch.stack([torch.randperm(256, generator=g, device="cuda") for _ in range(rows)])
    bits = bits.repeat(1, 2)[:, :k].to(torch.uint8).contiguous()
    if major == "mn":
        bits = bits.t().contiguous().t()
    elif major == "strided":
        bits = torch.zeros(rows, 2 * k, dtype=torch.uint8, device="cuda")[:, ::2].copy_(bits)
    x = bits.view(NUZ)
    y = gemm_kernel._ops.ops.prepare_operand(x, False)
    assert y.dtype == FN and y.shape == (rows, -(-k // 16) * 16)
    want = x.float().to(FN)
    nan = torch.isnan(x.float())
    assert nan.sum() > 0 and torch.equal(torch.isnan(y[:, :k].float()), nan)
    got = y[:, :k].view(torch.uint8)
    assert torch.equal(got[~nan], want.view(torch.uint8)[~nan])
    assert not y[:, k:].view(torch.uint8).any()


@pytest.mark.parametrize("layout", ["nt", "guide", "challenge"])
@pytest.mark.parametrize("m,n,k", [(1024, 1536, 7168), (255, 576, 1000), (4096, 4096, 512)])
def test_fast_mode_runs_fnuz_on_fp8_tensor_cores(gemm_kernel, layout, m, n, k):
    """e4m3fnuz operands in fast mode take an FP8 kernel after the operand pass, meet the
    fast contract, and a NaN (0x80) in either operand makes its row or column NaN."""
    seed = fresh_seed()
    a, b, sa, sb = layout_inputs(m, n, k, layout, seed, NUZ)
    p = gemm_kernel.plan_nt(a, b, sa, sb)
    assert p.name.startswith("fp8_") and "exact" not in p.name, p
    c = Checker(gemm_kernel, a, b, sa, sb, f"{layout} {m}x{n}x{k} seed={seed}")
    c.fast(gemm_kernel.gemm_nt(a, b, sa, sb))
    a.view(torch.uint8)[7, k // 2] = 0x80
    b.view(torch.uint8)[n - 3, 1] = 0x80
    out = gemm_kernel.gemm_nt(a, b, sa, sb)
    nan = torch.zeros(m, n, dtype=torch.bool, device="cuda")
    nan[7, :] = True
    nan[:, n - 3] = True
    assert torch.equal(torch.isnan(out), nan), f"seed={seed}"
    ref = gemm_kernel.reference.gemm_nt_reference(a, b, sa, sb)
    d = gemm_kernel.reference.calc_diff(out[~nan], ref[~nan])
    assert d < FAST_LIMIT, f"calc_diff {d:.3g} (seed={seed})"


@pytest.mark.parametrize("sa_kind,sb_kind", [("row", "row"), ("col", "col"), ("row", "bcast"),
                                             ("bcast", "col"), ("neg", "neg")])
def test_scale_layouts_and_signs(gemm_kernel, sa_kind, sb_kind):
    m, n, k = 200, 300, 640
    seed = fresh_seed()
    a, b, sa, sb = make_nt(m, n, k, seed=seed)

    def shaped(s, kind):
        if kind == "col":
            return s.t().contiguous().t()
        if kind == "bcast":  # one scale per K block, broadcast over rows: stride 0
            return s[:1].expand_as(s)
        if kind == "neg":
            return -s.abs() - 0.01
        return s

    sa, sb = shaped(sa, sa_kind), shaped(sb, sb_kind)
    c = Checker(gemm_kernel, a, b, sa, sb, f"{sa_kind}/{sb_kind} seed={seed}")
    c.fast(gemm_kernel.gemm_nt(a, b, sa, sb))
    c.exact(gemm_kernel.gemm_nt(a, b, sa, sb, precision="exact"))


@pytest.mark.parametrize("case", ["pitch", "offset", "step", "both-steps"])
def test_general_strides(gemm_kernel, case):
    """Views that are neither packed nor 16-byte aligned take the general path."""
    m, n, k = 130, 260, 384
    seed = fresh_seed()
    g = torch.Generator(device="cuda").manual_seed(seed)
    big_a = (torch.randn(m * 2 + 3, k * 2 + 40, generator=g, device="cuda")).to(FN)
    big_b = (torch.randn(n * 2 + 3, k * 2 + 40, generator=g, device="cuda")).to(FN)
    if case == "pitch":
        a, b = big_a[:m, :k], big_b[:n, :k]
    elif case == "offset":
        a, b = big_a[1:m + 1, 3:k + 3], big_b.t()[5:k + 5, 1:n + 1].t()
    elif case == "step":
        a, b = big_a[:m, : 2 * k : 2], big_b[: 2 * n : 2, :k]
    else:
        a, b = big_a[: 2 * m : 2, : 2 * k : 2], big_b[: 2 * n : 2, : 2 * k : 2]
    kb, nb = math.ceil(k / 128), math.ceil(n / 128)
    sa = torch.randn(m, kb, generator=g, device="cuda")
    sb = torch.randn(nb, kb, generator=g, device="cuda")
    c = Checker(gemm_kernel, a, b, sa, sb, f"{case} seed={seed}")
    c.fast(gemm_kernel.gemm_nt(a, b, sa, sb))
    c.exact(gemm_kernel.gemm_nt(a, b, sa, sb, precision="exact"))


@pytest.mark.parametrize("case", ["transposed", "pitch", "offset"])
def test_output_layouts(gemm_kernel, case):
    m, n, k = 96, 200, 256
    seed = fresh_seed()
    a, b, sa, sb = make_nt(m, n, k, seed=seed)
    c = Checker(gemm_kernel, a, b, sa, sb, f"out={case} seed={seed}")
    if case == "transposed":
        buf = torch.full((n, m), float("nan"), dtype=torch.bfloat16, device="cuda")
        out = buf.t()
    elif case == "pitch":
        buf = torch.full((m, n + 24), float("nan"), dtype=torch.bfloat16, device="cuda")
        out = buf[:, :n]
    else:
        buf = torch.full((m * n + 1,), float("nan"), dtype=torch.bfloat16, device="cuda")
        out = buf[1:].view(m, n)
    gemm_kernel.gemm_nt(a, b, sa, sb, out)
    c.fast(out)
    if case == "pitch":
        assert torch.isnan(buf[:, n:]).all(), "wrote outside out"


@pytest.mark.parametrize("precision", ["fast", "exact"])
def test_interleaved_output_layout(gemm_kernel, precision):
    """An out whose rows interleave without sharing an element (rows 201 elements apart,
    elements 2 apart, 200 wide: row 0 takes the even addresses up to 398, row 1 the odd
    ones from 201) is legal: the Python checks and the compiled op accept it, and the op
    writes it through its temporary, nothing outside it."""
    m, n, k = 96, 200, 256
    seed = fresh_seed()
    a, b, sa, sb = make_nt(m, n, k, seed=seed)
    c = Checker(gemm_kernel, a, b, sa, sb, f"interleaved out {precision} seed={seed}")
    check = c.exact if precision == "exact" else c.fast
    buf = torch.full(((m - 1) * 201 + (n - 1) * 2 + 1,), float("nan"), dtype=torch.bfloat16,
                     device="cuda")
    out = buf.as_strided((m, n), (201, 2))
    assert gemm_kernel.gemm_nt(a, b, sa, sb, out, precision=precision) is out
    check(out)
    assert int(torch.isnan(buf).sum()) == buf.numel() - m * n, "wrote outside out"
    buf.fill_(float("nan"))
    gemm_kernel._ops.ops.gemm_nt_out(out, a, b, sa, sb, precision == "exact")
    check(out)
    assert int(torch.isnan(buf).sum()) == buf.numel() - m * n, "wrote outside out"
    buf.fill_(float("nan"))
    assert gemm_kernel.gemm(a, b.t(), sa.t(), sb.t(), out, precision=precision) is out
    check(out)


def test_guide_snippet(gemm_kernel):
    """Step 5 of the guide, as written (e4m3fnuz, unit scales, caller-provided C)."""
    gemm = gemm_kernel
    M, N, K = 1024, 1536, 7168
    QUANT_SIZE = 128
    device = torch.device("cuda")
    A_fp32 = torch.randn(M, K, device=device)
    B_fp32 = torch.randn(K, N, device=device)
    A_fp8 = A_fp32.to(torch.float8_e4m3fnuz)
    B_fp8 = B_fp32.to(torch.float8_e4m3fnuz)
    A_scale = torch.ones(K // QUANT_SIZE, M, device=device, dtype=torch.float32)
    B_scale = torch.ones(K // QUANT_SIZE, N // QUANT_SIZE, device=device, dtype=torch.float32)
    C = torch.zeros(M, N, device=device, dtype=torch.bfloat16)
    result = gemm.gemm(A_fp8, B_fp8, A_scale, B_scale, C)
    assert result is C
    c = Checker(gemm_kernel, A_fp8, B_fp8.t(), A_scale.t(), B_scale.t(), "guide snippet",
                challenge=True)
    c.fast(C)
    exact = poisoned(M, N)
    assert gemm.gemm(A_fp8, B_fp8, A_scale, B_scale, exact, precision="exact") is exact
    c.exact(exact)


@pytest.mark.parametrize("variant", [0, 1, 2, 3, 4, 7, 9, 10, 17])
@pytest.mark.parametrize("splits", [0, 1, 3])
def test_every_kernel_variant(gemm_kernel, variant, splits):
    """Each compiled variant, and forced split-K on the stream-K ones, is correct."""
    m, n, k = 300, 400, 1920
    seed = fresh_seed()
    a, b, sa, sb = make_nt(m, n, k, seed=seed, a_major="mn")
    c = Checker(gemm_kernel, a, b, sa, sb, f"variant={variant} splits={splits} seed={seed}")
    exact = variant in (3, 4, 9, 17)
    out = poisoned(m, n)
    gemm_kernel._ops.ops.gemm_nt_out(out, a, b, sa, sb, exact, variant, splits)
    (c.exact if exact else c.fast)(out)


@pytest.mark.parametrize("variant", [5, 6, 8])
@pytest.mark.parametrize("m,n,k,splits", [(300, 400, 1920, 3), (300, 400, 1920, 15),
                                          (1, 100, 256, 2), (70, 576, 7168, 7),
                                          (200, 1000, 7168 + 64, 3)])
def test_split_k_variants(gemm_kernel, variant, m, n, k, splits):
    """K cut into slices run as the batch mode, summed by a second kernel: correct for
    tails in M and N, every slice count that tiles K, and the challenge's scale layouts."""
    seed = fresh_seed()
    kp = -(-k // 16) * 16
    a, b, sa, sb = make_nt(m, n, k, seed=seed, a_major="mn", b_major="mn", sa_layout="col",
                           sb_layout="col")
    what = f"variant={variant} {m}x{n}x{k} splits={splits} seed={seed}"
    if kp % (128 * splits):
        with pytest.raises(ValueError, match="splits"):
            gemm_kernel._ops.ops.gemm_nt(a, b, sa, sb, variant == 8, variant, splits)
        return
    exact = variant == 8
    out = poisoned(m, n)
    gemm_kernel._ops.ops.gemm_nt_out(out, a, b, sa, sb, exact, variant, splits)
    c = Checker(gemm_kernel, a, b, sa, sb, what)
    (c.exact if exact else c.fast)(out)


@pytest.mark.parametrize("m,n,k", [(64, 512, 7168), (40, 300, 4224), (200, 256, 8192 + 128)])
def test_op_splits_few_tiles(gemm_kernel, m, n, k):
    """Shapes with too few tiles for the op's wanted unit count: it splits K as far as the
    K blocks allow (64x512x7168: 14 slices; 4224 = 33 blocks: 11; 65 blocks: none)."""
    check_op_nt(gemm_kernel, m, n, k)


@pytest.mark.parametrize("m,n,k", [(1, 8, 16), (1, 100, 200), (17, 576, 7168 + 64),
                                   (255, 1000, 128), (129, 136, 256), (128, 128, 128),
                                   (2000, 2100, 2176), (2000, 2100, 2048), (2000, 2100, 128),
                                   (2000, 2100, 256), (64, 7168, 16384), (130, 264, 4096),
                                   (257, 392, 4224), (65, 136, 8320)])
@pytest.mark.parametrize("layout", ["nt", "challenge", "nt-col-scales"])
@pytest.mark.parametrize("variant", [10, 12, 17])
def test_overlap_kernel(gemm_kernel, m, n, k, layout, variant):
    """The hand-written kernel, alone (variant 10), on CTA pairs that share B by
    multicast (12; with an odd tile-row count the last pair's second tile is empty) and
    on BF16 operands in exact mode (17: each K block in two 128-byte sub-tiles):
    tails in every dimension, K of one block and
    of many (odd and even counts, for its two alternating accumulators), persistent CTAs
    with several tiles each (2000x2100: 272 tiles, whose epilogues overlap the next
    tile's first MMAs), every operand and scale layout (column-major scales are read in
    place by 10 and 12 up to four blocks of K, K <= 512, and otherwise copied row-major
    in the preparation launch, alone for K-major operands)."""
    seed = fresh_seed()
    major, scales = {"nt": ("k", "row"), "challenge": ("mn", "col"),
                     "nt-col-scales": ("k", "col")}[layout]
    a, b, sa, sb = make_nt(m, n, k, seed=seed, a_major=major, b_major=major,
                           sa_layout=scales, sb_layout=scales)
    out = poisoned(m, n)
    exact = variant == 17
    gemm_kernel._ops.ops.gemm_nt_out(out, a, b, sa, sb, exact, variant, -1)
    what = f"variant={variant} {m}x{n}x{k} {layout} seed={seed}"
    c = Checker(gemm_kernel, a, b, sa, sb, what)
    (c.exact if exact else c.fast)(out)


def pitched_mn(a: torch.Tensor, extra: int = 0) -> torch.Tensor:
    """``a`` (M, K), MN-major, as a view of a (K, Mp) buffer with Mp the next multiple of
    16 (16-byte aligned rows of K for any M) plus ``extra`` columns. The columns past M
    hold e4m3fn NaN, so a kernel reading them would fail the check."""
    m, k = a.shape
    mp = -(-m // 16) * 16 + extra
    buf = torch.full((k, mp), 0x7F, dtype=torch.uint8, device=a.device).view(a.dtype)
    buf[:, :m] = a.t()
    return buf[:, :m].t()


def pitched_k(a: torch.Tensor, extra: int = 16) -> torch.Tensor:
    """``a`` (rows, K), K-major, as a view of a (rows, Kp) buffer with Kp the next
    multiple of 16 plus ``extra`` columns. The columns past K hold e4m3fn NaN, so a kernel
    reading them would fail the check."""
    rows, k = a.shape
    kp = -(-k // 16) * 16 + extra
    buf = torch.full((rows, kp), 0x7F, dtype=torch.uint8, device=a.device).view(a.dtype)
    buf[:, :k] = a
    return buf[:, :k]


@pytest.mark.parametrize("m,n,k", [(2, 8, 16), (17, 576, 7168 + 64), (255, 1000, 128),
                                   (129, 136, 256), (128, 128, 128), (2000, 2100, 2176),
                                   (2000, 2100, 2048), (2000, 2100, 128), (2000, 2100, 256),
                                   (130, 264, 4096), (257, 392, 4224), (65, 136, 8320),
                                   (300, 100, 200)])
@pytest.mark.parametrize("b_major,scales", [("mn", "col"), ("k", "row"), ("k", "col")])
@pytest.mark.parametrize("variant", [13, 14])
def test_a_mn_major_kernel(gemm_kernel, m, n, k, b_major, scales, variant):
    """The hand-written kernel reading A MN-major in place (variant 13; 14 on CTA pairs
    sharing B): A's fragments built from the TMA-loaded MN-major tile, B rewritten in the
    matching K order by the preparation launch (transposed or row-copied). Tails in
    every dimension (M not a multiple of 16 through a padded pitch, K not a multiple of
    16), one block and many, several tiles per CTA, both scale layouts."""
    seed = fresh_seed()
    a, b, sa, sb = make_nt(m, n, k, seed=seed, a_major="mn", b_major=b_major, sa_layout=scales,
                           sb_layout=scales)
    a = pitched_mn(a)
    out = poisoned(m, n)
    gemm_kernel._ops.ops.gemm_nt_out(out, a, b, sa, sb, False, variant, -1)
    what = f"variant={variant} {m}x{n}x{k} b={b_major} scales={scales} seed={seed}"
    Checker(gemm_kernel, a, b, sa, sb, what).fast(out)


def test_a_mn_major_kernel_rejects_other_layouts(gemm_kernel):
    """Variants 13 and 14 read A in place: K-major A, unaligned rows and a single row
    raise ValueError naming the requirement."""
    seed = fresh_seed()
    ops = gemm_kernel._ops.ops
    a, b, sa, sb = make_nt(64, 256, 256, seed=seed)
    with pytest.raises(ValueError, match="MN-major"):
        ops.gemm_nt(a, b, sa, sb, False, 13, -1)
    a, b, sa, sb = make_nt(17, 256, 256, seed=seed, a_major="mn")  # rows of 17 bytes
    with pytest.raises(ValueError, match="16-byte aligned"):
        ops.gemm_nt(a, b, sa, sb, False, 14, -1)
    a, b, sa, sb = make_nt(1, 256, 256, seed=seed, a_major="mn")
    with pytest.raises(ValueError, match="M > 1"):
        ops.gemm_nt(a, b, sa, sb, False, 13, -1)


SPLIT_SHAPES = [(1, 8, 16), (2, 100, 200), (17, 576, 7168 + 64), (255, 1000, 128),
                (129, 136, 256), (300, 100, 200), (65, 136, 8320), (1024, 576, 7168),
                (1000, 1500, 1920), (2000, 2100, 2176)]


@pytest.mark.parametrize("m,n,k", SPLIT_SHAPES)
@pytest.mark.parametrize("splits", [0, 1, 2, 3, 7, 64])
@pytest.mark.parametrize("layout", ["nt", "challenge", "a-mn"])
def test_overlap_splitk_kernel(gemm_kernel, m, n, k, splits, layout):
    """The hand-written kernel with K cut into slices (variant 15; 16 reads A MN-major in
    place), the partial tiles summed in-kernel by the last slice to arrive: tails in
    every dimension, slices of one block and uneven slices (7 of 57 blocks), as many
    slices as blocks (64 capped at K's block count), several units per CTA (2000x2100
    with 17 slices: 4624 units), the kernel's own slice count (0), no split (1), every
    operand and scale layout."""
    seed = fresh_seed()
    variant = 16 if layout == "a-mn" else 15
    major, scales = {"nt": ("k", "row"), "challenge": ("mn", "col"), "a-mn": ("mn", "col")}[layout]
    a, b, sa, sb = make_nt(m, n, k, seed=seed, a_major=major, b_major=major,
                           sa_layout=scales, sb_layout=scales)
    if variant == 16:
        if m < 2:
            pytest.skip("variant 16 reads A in place, which needs M > 1")
        a = pitched_mn(a)
    s = min(splits, -(-k // 128))
    out = poisoned(m, n)
    gemm_kernel._ops.ops.gemm_nt_out(out, a, b, sa, sb, False, variant, s)
    what = f"variant={variant} {m}x{n}x{k} splits={s} {layout} seed={seed}"
    Checker(gemm_kernel, a, b, sa, sb, what).fast(out)


@pytest.mark.parametrize("variant", [15, 16])
def test_overlap_splitk_is_deterministic(gemm_kernel, variant):
    """The slices are summed in slice order whichever CTA arrives last, so repeated runs
    give the same bits (here 40 tiles x 3 slices, all in flight at once)."""
    seed = fresh_seed()
    a, b, sa, sb = make_nt(1024, 576, 7168, seed=seed, a_major="mn", b_major="mn",
                           sa_layout="col", sb_layout="col")
    ops = gemm_kernel._ops.ops
    first, differing = repeat_bitwise(ops, a, b, sa, sb, False, variant, 3, 20)
    assert differing == 0, f"{differing} of 20 repeats differ, seed={seed}"
    Checker(gemm_kernel, a, b, sa, sb, f"variant={variant} seed={seed}").fast(first)


def test_a_mn_major_kernel_repeats_bitwise(gemm_kernel):
    """Variant 13 on several tiles per CTA gives the same bits on every launch (A's
    fragments come from ldmatrix loads of a stage that TMA refills once it is handed
    back)."""
    seed = fresh_seed()
    a, b, sa, sb = layout_inputs(4096, 4096, 7168, "challenge", seed)
    ops = gemm_kernel._ops.ops
    first, differing = repeat_bitwise(ops, a, b, sa, sb, False, 13, 0, 32)
    assert differing == 0, f"{differing} of 32 launches differ from the first, seed={seed}"
    Checker(gemm_kernel, a, b, sa, sb, f"variant=13 seed={seed}").fast(first)


def test_overlap_splitk_rejects_bad_splits(gemm_kernel):
    ops = gemm_kernel._ops.ops
    a, b, sa, sb = make_nt(64, 256, 1024, seed=fresh_seed())
    with pytest.raises(ValueError, match="splits=9 does not fit .*8 blocks"):
        ops.gemm_nt(a, b, sa, sb, False, 15, 9)
    a, b, sa, sb = make_nt(64, 256, 65 * 128, seed=fresh_seed())
    with pytest.raises(ValueError, match="splits=65 does not fit"):
        ops.gemm_nt(a, b, sa, sb, False, 15, 65)


def check_graph_replays(gemm_kernel, m, n, k, *, exact, variant, splits, replays=3, **layout):
    """Captures an explicit-variant call in a CUDA graph, then replays it with new inputs
    copied into the captured tensors, checking every result."""
    seed = fresh_seed()
    a, b, sa, sb = make_nt(m, n, k, seed=seed, **layout)
    ops = gemm_kernel._ops.ops
    out = poisoned(m, n)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up outside the capture
        ops.gemm_nt_out(out, a, b, sa, sb, exact, variant, splits)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.gemm_nt_out(out, a, b, sa, sb, exact, variant, splits)
    for i in range(replays):
        for dst, src in zip((a, b, sa, sb), make_nt(m, n, k, seed=seed + 1 + i, **layout),
                            strict=True):
            dst.copy_(src)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        checker = Checker(gemm_kernel, a, b, sa, sb, f"variant={variant} replay {i} seed={seed}")
        if exact:
            checker.exact(out)
        else:
            checker.fast(out)


def test_overlap_splitk_in_cuda_graph(gemm_kernel):
    """The arrival counters are cleared on the stream before every launch, so a captured
    graph replays correctly with new inputs."""
    check_graph_replays(gemm_kernel, 300, 576, 2048, exact=False, variant=15, splits=4,
                        a_major="mn", b_major="mn")


def test_cluster_splitk_in_cuda_graph(gemm_kernel):
    """The op's choice for few rows with long K and a narrow B (variant 11, one launch,
    no workspace) captures and replays with new inputs, 64- and 128-row tiles."""
    check_graph_replays(gemm_kernel, 64, 2112, 7168, exact=False, variant=11, splits=0)
    check_graph_replays(gemm_kernel, 100, 1000, 4224, exact=False, variant=11, splits=0,
                        a_major="mn", b_major="mn")


@pytest.mark.parametrize("m,n,k", [(1, 8, 16), (1, 100, 200), (17, 576, 7168 + 64),
                                   (64, 2112, 7168), (64, 7168, 2048), (65, 136, 8320),
                                   (128, 4096, 7168), (100, 1000, 384), (255, 392, 4224),
                                   (300, 400, 1920)])
@pytest.mark.parametrize("splits", [0, 1, 2, 8])
@pytest.mark.parametrize("layout", ["nt", "challenge"])
def test_cluster_splitk_kernel(gemm_kernel, m, n, k, splits, layout):
    """The few-row kernel (variant 11): K split over the CTAs of a cluster, partial tiles
    summed through distributed shared memory. Tiles of 64x128 (M <= 64) and 128x64,
    several tile rows (M > 128), tails in every dimension, slices of one block, empty
    slices (more slices than K blocks), the shape's own choice (0), any scale layout."""
    seed = fresh_seed()
    major, scales = {"nt": ("k", "row"), "challenge": ("mn", "col")}[layout]
    a, b, sa, sb = make_nt(m, n, k, seed=seed, a_major=major, b_major=major,
                           sa_layout=scales, sb_layout=scales)
    out = poisoned(m, n)
    gemm_kernel._ops.ops.gemm_nt_out(out, a, b, sa, sb, False, 11, splits)
    what = f"variant=11 {m}x{n}x{k} splits={splits} {layout} seed={seed}"
    Checker(gemm_kernel, a, b, sa, sb, what).fast(out)


@pytest.mark.parametrize("m,n,k", [(1, 8, 16), (1, 100, 200), (17, 576, 7168 + 64),
                                   (64, 2112, 7168), (64, 7168, 2048), (65, 136, 8320),
                                   (128, 4096, 7168), (64, 32768, 512), (100, 1000, 384),
                                   (255, 392, 4224), (300, 400, 1920)])
@pytest.mark.parametrize("splits", [0, 1, 2, 7, 64])
@pytest.mark.parametrize("layout", ["nt", "challenge"])
@pytest.mark.parametrize("variant", [18, 19])
def test_fewrow_kernel(gemm_kernel, m, n, k, splits, layout, variant):
    """The few-row streaming kernel (variant 18; 19 in exact mode, B converted to FP16
    fragments in registers and A to an FP16 copy in shared memory, in a K order of its
    own): 64-row tiles (M <= 64) and 128-row ones (fast mode; exact mode takes 64-row tiles
    only, so M = 65-300 runs 2-5 tile rows), several tile rows, tails in every dimension, uneven slices (7 of 57 blocks), one
    slice per block (64, capped at K's block count), its own slice count (0), no split (1:
    bf16 written directly), more tiles than SMs (64x32768: 256, persistent CTAs), any
    scale layout (the challenge layout runs after a preparation launch, as its dependent)."""
    seed = fresh_seed()
    major, scales = {"nt": ("k", "row"), "challenge": ("mn", "col")}[layout]
    a, b, sa, sb = make_nt(m, n, k, seed=seed, a_major=major, b_major=major,
                           sa_layout=scales, sb_layout=scales)
    s = min(splits, -(-k // 128))
    exact = variant == 19
    out = poisoned(m, n)
    gemm_kernel._ops.ops.gemm_nt_out(out, a, b, sa, sb, exact, variant, s)
    what = f"variant={variant} {m}x{n}x{k} splits={s} {layout} seed={seed}"
    c = Checker(gemm_kernel, a, b, sa, sb, what)
    (c.exact if exact else c.fast)(out)


def test_fewrow_kernel_is_deterministic_and_rejects_bad_splits(gemm_kernel):
    """Slices are summed in slice order by a second kernel: repeated runs give the same
    bits. More slices than K blocks is refused with the argument named."""
    seed = fresh_seed()
    a, b, sa, sb = make_nt(64, 2112, 7168, seed=seed)
    ops = gemm_kernel._ops.ops
    first, differing = repeat_bitwise(ops, a, b, sa, sb, False, 18, 7, 10)
    assert differing == 0, f"{differing} of 10 repeats differ, seed={seed}"
    Checker(gemm_kernel, a, b, sa, sb, f"variant=18 seed={seed}").fast(first)
    a, b, sa, sb = make_nt(64, 256, 1024, seed=seed)
    with pytest.raises(ValueError, match="splits=9 does not fit .*8 blocks"):
        ops.gemm_nt(a, b, sa, sb, False, 18, 9)
    with pytest.raises(ValueError, match="exact=True and e4m3fn"):
        ops.gemm_nt(a, b, sa, sb, False, 19, 0)
    a, b, sa, sb = make_nt(64, 256, 1024, seed=seed, dtype_b=torch.float8_e4m3fnuz)
    with pytest.raises(ValueError, match="exact=True and e4m3fn"):
        ops.gemm_nt(a, b, sa, sb, True, 19, 0)


def check_exact_in_place(gemm_kernel, variant, splits, m, n, k, a_major, b_major, scales):
    """Runs an exact-mode variant that reads both operands in place (20-23) on pitched
    operands of the given layouts (the padding past each row holds e4m3fn NaN) and checks
    it with the challenge's checker; slice counts beyond the K blocks must be refused."""
    seed = fresh_seed()
    a, b, sa, sb = make_nt(m, n, k, seed=seed, a_major=a_major, b_major=b_major,
                           sa_layout=scales, sb_layout=scales)
    a = pitched_mn(a, extra=16) if a_major == "mn" else pitched_k(a)
    b = pitched_mn(b) if b_major == "mn" else pitched_k(b, extra=32)
    ops = gemm_kernel._ops.ops
    if splits > -(-k // 128):
        with pytest.raises(ValueError, match=f"splits={splits} does not fit"):
            ops.gemm_nt(a, b, sa, sb, True, variant, splits)
        return
    out = poisoned(m, n)
    ops.gemm_nt_out(out, a, b, sa, sb, True, variant, splits)
    Checker(gemm_kernel, a, b, sa, sb,
            f"variant={variant} splits={splits} {m}x{n}x{k} A {a_major}-major B {b_major}-major "
            f"{scales} scales seed={seed}").exact(out)


@pytest.mark.parametrize("m,n,k", [(2, 8, 16), (17, 100, 200), (64, 576, 7168 + 64),
                                   (129, 136, 8320), (300, 400, 1920), (255, 392, 4224),
                                   (1000, 4104, 384), (1024, 1536, 7168)])
@pytest.mark.parametrize("b_major,scales", [("mn", "row"), ("mn", "col"), ("k", "col")])
def test_exact_amn_kernel(gemm_kernel, m, n, k, b_major, scales):
    """Variant 20: exact mode reading A MN-major in place and B in place as it is stored
    (MN-major: the challenge's storage; or K-major), no preparation launch. A is
    converted into FP16 register fragments and B into FP16 copies in shared memory. Tails
    in every dimension (TMA's zero fill past the real M, N and K; N not a multiple of 8
    goes through a temporary output), one to 65 K blocks (odd and even counts), several
    tiles per CTA, row pitches wider than the rows, scales of either layout read in
    place."""
    check_exact_in_place(gemm_kernel, 20, 0, m, n, k, "mn", b_major, scales)


@pytest.mark.parametrize("m,n,k,splits", [(17, 100, 200, 2), (300, 400, 1920, 0),
                                          (300, 400, 1920, 15), (1024, 576, 7168 + 64, 0),
                                          (255, 392, 4224, 4), (1000, 4104, 384, 3),
                                          (1024, 512, 7168, 64), (4096, 640, 7168 + 64, 2)])
@pytest.mark.parametrize("b_major,scales", [("mn", "row"), ("mn", "col"), ("k", "row")])
def test_exact_amn_splitk_kernel(gemm_kernel, m, n, k, splits, b_major, scales):
    """Variant 21: variant 20 with each tile's K blocks cut into slices (uneven: 15 of
    15 blocks, 4 of 33; 0 fills one wave; 64 slices of 56 blocks is refused), the last
    slice to arrive summing the partial tiles in slice order. Tails in every dimension,
    several units per CTA, scales of either layout read in place, B MN-major or
    K-major."""
    check_exact_in_place(gemm_kernel, 21, splits, m, n, k, "mn", b_major, scales)


def test_exact_amn_splitk_is_deterministic_and_replays_in_a_graph(gemm_kernel):
    """Repeated runs give the same bits (40 tiles x 3 slices in flight at once), and the
    arrival counters are cleared before every launch, so a captured graph replays with
    new inputs."""
    m, n, k = 1024, 576, 7168
    layout = dict(a_major="mn", b_major="mn", sa_layout="col", sb_layout="col")
    seed = fresh_seed()
    a, b, sa, sb = make_nt(m, n, k, seed=seed, **layout)
    ops = gemm_kernel._ops.ops
    first, differing = repeat_bitwise(ops, a, b, sa, sb, True, 21, 3, 10)
    assert differing == 0, f"{differing} of 10 repeats differ, seed={seed}"
    Checker(gemm_kernel, a, b, sa, sb, f"variant=21 seed={seed}").exact(first)
    check_graph_replays(gemm_kernel, m, n, k, exact=True, variant=21, splits=3, replays=2,
                        **layout)


@pytest.mark.parametrize("variant,layout", [(20, "challenge"), (20, "a_mn"), (22, "nt"),
                                            (22, "guide"), (23, "nt"), (21, "challenge")])
def test_exact_in_place_kernels_repeat_bitwise(gemm_kernel, variant, layout):
    """Variants 20-23 on several tiles per CTA give the same bits on every launch. A stage
    handed back before its ldmatrix loads had returned let TMA refill it under them: 8-17
    of 240 launches of variant 22 at this shape differed (NOTES.md, v24)."""
    m, n, k = 4096, 4096, 7168
    splits = 2 if variant in (21, 23) else 0  # the split builds: two slices per tile
    seed = fresh_seed()
    a, b, sa, sb = layout_inputs(m, n, k, layout, seed)
    _, differing = repeat_bitwise(gemm_kernel._ops.ops, a, b, sa, sb, True, variant, splits, 64)
    assert differing == 0, f"{differing} of 64 launches differ from the first, seed={seed}"


@pytest.mark.parametrize("variant,a_major,b_major", [(20, "mn", "mn"), (20, "mn", "k"),
                                                    (22, "k", "k"), (22, "k", "mn")])
def test_exact_in_place_kernels_keep_nan(gemm_kernel, variant, a_major, b_major):
    """Variants 20 and 22, each operand read in place: an e4m3fn NaN (0x7F, 0xFF) in
    either operand makes its row or column of the product NaN, as in the reference; the
    rest stays exact."""
    m, n, k = 256, 384, 640
    seed = fresh_seed()
    a, b, sa, sb = make_nt(m, n, k, seed=seed, a_major=a_major, b_major=b_major,
                           sa_layout="col", sb_layout="col")
    a.view(torch.uint8)[5, 300] = 0xFF
    b.view(torch.uint8)[77, 129] = 0x7F
    b.view(torch.uint8)[200, 5] = 0xFF
    out = poisoned(m, n)
    gemm_kernel._ops.ops.gemm_nt_out(out, a, b, sa, sb, True, variant, 0)
    nan = torch.zeros(m, n, dtype=torch.bool, device="cuda")
    nan[5, :] = True
    nan[:, 77] = True
    nan[:, 200] = True
    assert torch.equal(torch.isnan(out), nan), f"seed={seed}"
    keep = ~nan
    ref = gemm_kernel.reference.gemm_nt_reference(a, b, sa, sb)
    assert torch.equal(torch.isnan(ref), nan), f"reference, seed={seed}"
    tol = 1e-3 + 2e-2 * ref[keep].abs()
    bad = int(((out[keep].double() - ref[keep].double()).abs() > tol).sum())
    assert bad == 0, f"{bad} mismatches, seed={seed}"


def test_exact_amn_kernel_rejects_other_layouts(gemm_kernel):
    """Variants 20 and 21 read A MN-major and B in place and run exact mode only; other
    calls are refused with the requirement named."""
    ops = gemm_kernel._ops.ops
    for b_major in ("mn", "k"):
        a, b, sa, sb = make_nt(64, 256, 1024, seed=fresh_seed(), a_major="k", b_major=b_major)
        for variant in (20, 21):
            with pytest.raises(ValueError, match="reads A MN-major and B in place"):
                ops.gemm_nt(a, b, sa, sb, True, variant, 0)
    a, b, sa, sb = make_nt(64, 256, 1024, seed=fresh_seed(), a_major="mn", b_major="mn")
    for variant in (20, 21):
        with pytest.raises(ValueError, match="exact=True and e4m3fn"):
            ops.gemm_nt(a, b, sa, sb, False, variant, 0)


@pytest.mark.parametrize("m,n,k", [(1, 8, 16), (2, 8, 16), (17, 100, 200), (64, 576, 7168 + 64),
                                   (129, 136, 8320), (300, 400, 1920), (255, 392, 4224),
                                   (1000, 4104, 384), (1024, 1536, 7168), (257, 300, 4100)])
@pytest.mark.parametrize("b_major,scales", [("k", "row"), ("k", "col"), ("mn", "col")])
def test_exact_ak_kernel(gemm_kernel, m, n, k, b_major, scales):
    """Variant 22: exact mode reading A K-major in place and B in place as it is stored
    (K-major: the NT layout; MN-major: the guide's convention with B stored (K, N)), no
    preparation launch. A is converted into FP16 register fragments, B into an FP16 copy
    in shared memory, both in the fragments' K order. Tails in every dimension (K not a
    multiple of 16 read in place: TMA's zero fill past the real K, whatever the row
    padding holds; N not a multiple of 8 through a temporary output), one to 65 K blocks,
    several tiles per CTA, row pitches wider than the rows, scales of either layout read
    in place."""
    check_exact_in_place(gemm_kernel, 22, 0, m, n, k, "k", b_major, scales)


@pytest.mark.parametrize("m,n,k,splits", [(17, 100, 200, 2), (300, 400, 1920, 0),
                                          (300, 400, 1920, 15), (1024, 576, 7168 + 64, 0),
                                          (255, 392, 4224, 4), (1000, 4104, 384, 3),
                                          (1024, 512, 7168, 64), (2048, 1280, 7168 + 8, 2)])
@pytest.mark.parametrize("b_major,scales", [("k", "row"), ("mn", "col")])
def test_exact_ak_splitk_kernel(gemm_kernel, m, n, k, splits, b_major, scales):
    """Variant 23: variant 22 with each tile's K blocks cut into slices (uneven, 0 fills
    one wave, more slices than blocks refused), summed in slice order by the last to
    arrive; B K-major or MN-major."""
    check_exact_in_place(gemm_kernel, 23, splits, m, n, k, "k", b_major, scales)


def test_exact_ak_splitk_is_deterministic_and_replays_in_a_graph(gemm_kernel):
    """Repeated runs give the same bits, and a captured graph replays with new inputs."""
    m, n, k = 1024, 576, 7168
    seed = fresh_seed()
    a, b, sa, sb = make_nt(m, n, k, seed=seed)
    ops = gemm_kernel._ops.ops
    first, differing = repeat_bitwise(ops, a, b, sa, sb, True, 23, 3, 10)
    assert differing == 0, f"{differing} of 10 repeats differ, seed={seed}"
    Checker(gemm_kernel, a, b, sa, sb, f"variant=23 seed={seed}").exact(first)
    check_graph_replays(gemm_kernel, m, n, k, exact=True, variant=23, splits=3, replays=2)
    check_graph_replays(gemm_kernel, 300, 400, 1920, exact=True, variant=22, splits=0, replays=2)
    check_graph_replays(gemm_kernel, 300, 400, 1920, exact=True, variant=23, splits=4, replays=2,
                        b_major="mn", sb_layout="col")


def test_exact_ak_kernel_rejects_other_layouts(gemm_kernel):
    """Variants 22 and 23 read A K-major and B in place and run exact mode only; other
    calls are refused with the requirement named."""
    ops = gemm_kernel._ops.ops
    for layout in (dict(a_major="mn"), dict(a_major="mn", b_major="mn"),
                   dict(dtype_b=torch.float8_e4m3fnuz)):
        a, b, sa, sb = make_nt(64, 256, 1024, seed=fresh_seed(), **layout)
        for variant in (22, 23):
            with pytest.raises(ValueError, match="reads A K-major and B in place|exact=True and e4m3fn"):
                ops.gemm_nt(a, b, sa, sb, True, variant, 0)
    a, b, sa, sb = make_nt(64, 256, 1024, seed=fresh_seed())
    shifted = torch.zeros(256, 1032, dtype=FN, device="cuda")[:, 8:]  # rows off alignment
    for variant in (22, 23):
        with pytest.raises(ValueError, match="reads A K-major and B in place"):
            ops.gemm_nt(a, shifted, sa, sb, True, variant, 0)
        with pytest.raises(ValueError, match="exact=True and e4m3fn"):
            ops.gemm_nt(a, b, sa, sb, False, variant, 0)


def test_cluster_splitk_rejects_bad_splits(gemm_kernel):
    a, b, sa, sb = make_nt(64, 256, 1024, seed=fresh_seed())
    with pytest.raises(ValueError, match="splits=3 .*cluster size"):
        gemm_kernel._ops.ops.gemm_nt(a, b, sa, sb, False, 11, 3)


@pytest.mark.parametrize("variant", [0, 2, 7])
@pytest.mark.parametrize("swizzle", [2, 4, 8])
def test_tile_order_swizzle(gemm_kernel, variant, swizzle):
    """The persistent schedulers' swizzled tile orders cover every tile exactly once."""
    m, n, k = 700, 1100, 1024
    seed = fresh_seed()
    a, b, sa, sb = make_nt(m, n, k, seed=seed, a_major="mn")
    out = poisoned(m, n)
    gemm_kernel._ops.ops.gemm_nt_out(out, a, b, sa, sb, False, variant, -1, swizzle)
    Checker(gemm_kernel, a, b, sa, sb, f"variant={variant} swizzle={swizzle} seed={seed}").fast(out)


def test_bad_swizzle_raises(gemm_kernel):
    a, b, sa, sb = make_nt(64, 128, 256, seed=fresh_seed())
    with pytest.raises(ValueError, match="swizzle must be"):
        gemm_kernel._ops.ops.gemm_nt(a, b, sa, sb, False, -1, -1, 3)


def test_split_k_rejects_slices_that_do_not_tile_k(gemm_kernel):
    a, b, sa, sb = make_nt(64, 128, 384, seed=fresh_seed())
    for splits in (0, 1, 2, 4):
        with pytest.raises(ValueError, match=f"splits={splits} does not fit"):
            gemm_kernel._ops.ops.gemm_nt(a, b, sa, sb, False, 5, splits)


def test_empty_and_zero_k(gemm_kernel):
    a = torch.zeros(0, 256, dtype=FN, device="cuda")
    b = torch.zeros(64, 256, dtype=FN, device="cuda")
    out = gemm_kernel.gemm_nt(a, b, torch.ones(0, 2, device="cuda"), torch.ones(1, 2, device="cuda"))
    assert out.shape == (0, 64)
    a = torch.zeros(8, 0, dtype=FN, device="cuda")
    b = torch.zeros(16, 0, dtype=FN, device="cuda")
    out = poisoned(8, 16)
    gemm_kernel.gemm_nt(a, b, torch.ones(8, 0, device="cuda"), torch.ones(1, 0, device="cuda"), out)
    assert (out == 0).all()


PLAN_CASES = [  # m, n, k, layout, precision
    (1024, 1536, 2048, "challenge", "fast"),
    (1024, 1536, 2048, "challenge", "exact"),
    (64, 2112, 7168, "nt", "fast"),
    (64, 2112, 7168, "nt", "exact"),
    (128, 2112, 7168, "challenge", "fast"),
    (64, 4096, 7168, "nt", "fast"),
    (4096, 5120, 256, "challenge", "exact"),
    (4096, 5120, 512, "nt", "fast"),
    (300, 200, 300, "nt", "exact"),
    (1024, 576, 7168, "challenge", "exact"),
    (6144, 512, 7168, "challenge", "exact"),
    (1024, 576, 7168, "nt", "exact"),
    (6144, 512, 7168, "nt", "exact"),
    (1024, 1536, 7168, "nt", "exact"),
    (1024, 1536, 7168, "guide", "exact"),
    (1024, 576, 7168, "guide", "exact"),
    (1024, 1536, 7168, "a_mn", "exact"),
    (64, 7168, 16384, "nt", "fast"),
    (17, 4096, 16400, "challenge", "fast"),
    (4096, 5120, 512, "nt_cs", "fast"),
    (4096, 5120, 512, "challenge", "fast"),
    (4096, 5120, 1024, "nt_cs", "fast"),
]


def layout_inputs(m, n, k, layout, seed, dtype=FN):
    """NT operands K-major with row-major scales; the challenge's storage: both operands
    MN-major, both scales transposed views; or the guide's convention with every tensor
    row-major as given (A (M, K), B (K, N), scales (KB, M) and (KB, NB)), seen as NT; or
    A MN-major with B K-major ("a_mn"); or NT operands with both scales column-major
    ("nt_cs")."""
    mn = layout == "challenge"
    guide = layout == "guide"
    if layout == "a_mn":  # A a transposed view, B K-major
        return make_nt(m, n, k, seed=seed, a_major="mn", dtype_a=dtype, dtype_b=dtype,
                       sa_layout="col")
    if layout == "nt_cs":
        return make_nt(m, n, k, seed=seed, dtype_a=dtype, dtype_b=dtype, sa_layout="col",
                       sb_layout="col")
    return make_nt(m, n, k, seed=seed, a_major="mn" if mn else "k",
                   b_major="mn" if mn or guide else "k", dtype_a=dtype, dtype_b=dtype,
                   sa_layout="col" if mn or guide else "row",
                   sb_layout="col" if mn or guide else "row")


@pytest.mark.parametrize("m,n,k,layout,precision", PLAN_CASES)
def test_plan_names_the_kernel_the_op_launches(gemm_kernel, m, n, k, layout, precision):
    """The op's output is bitwise the output of the kernel plan_nt names, launched
    explicitly with its splits; plan (the guide's convention) agrees with plan_nt."""
    seed = fresh_seed()
    a, b, sa, sb = layout_inputs(m, n, k, layout, seed)
    p = gemm_kernel.plan_nt(a, b, sa, sb, precision=precision)
    assert p.variant >= 0 and p.name not in ("none", "unknown"), p
    assert gemm_kernel.plan(a, b.t(), sa.t(), sb.t(), precision=precision) == p
    chosen = gemm_kernel.gemm_nt(a, b, sa, sb, precision=precision)
    forced = gemm_kernel._ops.ops.gemm_nt(a, b, sa, sb, precision == "exact", p.variant, p.splits)
    assert torch.equal(chosen, forced), f"seed={seed}, {p}"


@pytest.mark.parametrize("m,n,k,layout,precision,dtype,name", [
    # exact mode, both operands MN-major on one wave: converted inside the GEMM (v20)
    (1024, 1536, 2048, "challenge", "exact", FN, "fp8_coop_128x128_exact_amn"),
    # ... split along K where the tiles fill at most half the GPU and K is long (v22)
    (1024, 576, 7168, "challenge", "exact", FN, "fp8_coop_128x128_exact_amn_splitk"),
    # ... and in two slices on one to one and a half waves with K >= 7168 (160 tiles)
    (4096, 640, 7168, "challenge", "exact", FN, "fp8_coop_128x128_exact_amn_splitk"),
    # A K-major (the NT layout; the guide's convention, B stored (K, N)): the same kernels
    # reading A K-major (v23)
    (1024, 1536, 7168, "nt", "exact", FN, "fp8_coop_128x128_exact_ak"),
    (1024, 576, 7168, "nt", "exact", FN, "fp8_coop_128x128_exact_ak_splitk"),
    (4096, 640, 7168, "nt", "exact", FN, "fp8_coop_128x128_exact_ak_splitk"),
    (1024, 1536, 7168, "guide", "exact", FN, "fp8_coop_128x128_exact_ak"),
    # A MN-major with B K-major: the kernels reading A MN-major (v23)
    (1024, 1536, 7168, "a_mn", "exact", FN, "fp8_coop_128x128_exact_amn"),
    # ... and beyond nine waves with short K: the preparation pass and the BF16 kernel
    (4096, 5120, 256, "challenge", "exact", FN, "bf16_coop_128x128_overlap"),
    # ... and from five waves with long K (v24)
    (4096, 4096, 7168, "nt", "exact", FN, "bf16_coop_128x128_overlap"),
    (4096, 4096, 7168, "guide", "exact", FN, "bf16_coop_128x128_overlap"),
    # exact mode on few rows of e4m3fn: the few-row kernel converting B in registers
    (64, 2112, 7168, "nt", "exact", FN, "fp8_fewrow_exact"),
    # e4m3fnuz never goes to the kernels that convert e4m3fn themselves
    (64, 2112, 7168, "nt", "exact", NUZ, "bf16_pingpong_64x128_splitk"),
    # six or more waves in fast mode, short K: the hand-written kernel
    (4096, 5120, 512, "nt", "fast", FN, "fp8_coop_128x128_overlap"),
    # few rows, long K, a narrow B: the cluster split-K kernel, one launch (v32) ...
    (64, 2112, 7168, "nt", "fast", FN, "fp8_cluster_splitk"),
    (128, 2112, 7168, "nt", "fast", FN, "fp8_cluster_splitk"),
    # (and where no slice count tiles K, after a preparation launch too) ...
    (17, 576, 7168 + 64, "challenge", "fast", NUZ, "fp8_cluster_splitk"),
    # ... but otherwise, after a preparation launch, CUTLASS's split-K (v47)
    (64, 1536, 7168, "challenge", "fast", FN, "fp8_pingpong_64x128_splitk"),
    (128, 512, 7168, "challenge", "fast", FN, "fp8_pingpong_64x128_splitk"),
    (64, 1536, 7168, "guide", "fast", FN, "fp8_pingpong_64x128_splitk"),
    (64, 3072, 4096, "guide", "fast", FN, "fp8_pingpong_64x128_splitk"),
    (64, 1536, 7168, "nt", "fast", FN, "fp8_cluster_splitk"),
    # ... and CUTLASS's split-K with a wider one (with up to 64 rows and K >= 7168 on the
    # H100, the few-row kernel: test_plan_fast_follows_memory_bandwidth)
    (128, 3072, 7168, "nt", "fast", FN, "fp8_pingpong_64x128_splitk"),
    # up to 64 rows with B beyond the L2's size: the few-row kernel, B evict-first (v27)
    (64, 7168, 16384, "nt", "fast", FN, "fp8_fewrow"),
    (1, 4096, 32768, "challenge", "fast", FN, "fp8_fewrow"),
    # ... not with 128 rows (below the L2's size: test_plan_fast_follows_memory_bandwidth)
    (128, 7168, 16384, "nt", "fast", FN, "fp8_pingpong_64x128"),
])
def test_plan_follows_the_measured_choices(gemm_kernel, m, n, k, layout, precision, dtype, name):
    """Choices that NOTES.md's measurements put on every Hopper part (114-132 SMs)."""
    a, b, sa, sb = layout_inputs(m, n, k, layout, fresh_seed(), dtype)
    assert gemm_kernel.plan_nt(a, b, sa, sb, precision=precision).name == name


def memory_gbs() -> int:
    """Peak memory bandwidth in GB/s as the op computes it (memory clock and bus width),
    0 where torch does not report them."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    clock_khz = getattr(props, "memory_clock_rate", 0)
    bus_bits = getattr(props, "memory_bus_width", 0)
    return int(2.0 * clock_khz * 1e3 * (bus_bits / 8) / 1e9)


def choice_by_bandwidth(below_4tbs: str, from_4tbs: str) -> tuple[str, int]:
    """The kernel name measured for this GPU's memory bandwidth (under 4 TB/s: the H100),
    and that bandwidth; skips where it is not reported or the part is not a 132-SM one
    (the waves differ)."""
    gbs = memory_gbs()
    if gbs == 0 or torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("memory bandwidth not reported, or not a 132-SM part (the waves differ)")
    return (below_4tbs if gbs < 4000 else from_4tbs), gbs


@pytest.mark.parametrize("m,n,k,layout,below_4tbs,from_4tbs", EXACT_BY_BANDWIDTH)
def test_plan_exact_conversion_range_follows_memory_bandwidth(gemm_kernel, m, n, k, layout,
                                                              below_4tbs, from_4tbs):
    """Exact mode converts e4m3fn operands inside the GEMM over a range of grids that
    depends on how much the conversion pass costs, so on the memory bandwidth (NOTES.md,
    v24 on the H100, v25 on the H200); on few rows the range is the same on both (v48),
    though the split's row depends on the wave's size (132 SMs here)."""
    want, gbs = choice_by_bandwidth(below_4tbs, from_4tbs)
    a, b, sa, sb = layout_inputs(m, n, k, layout, fresh_seed())
    assert gemm_kernel.plan_nt(a, b, sa, sb, precision="exact").name == want, f"{gbs} GB/s"


@pytest.mark.parametrize("m,n,k,layout,below_4tbs,from_4tbs", FAST_BY_BANDWIDTH)
def test_plan_fast_follows_memory_bandwidth(gemm_kernel, m, n, k, layout, below_4tbs,
                                            from_4tbs):
    """Fast-mode choices measured apart on the H100 (under 4 TB/s) and the H200."""
    want, gbs = choice_by_bandwidth(below_4tbs, from_4tbs)
    a, b, sa, sb = layout_inputs(m, n, k, layout, fresh_seed())
    assert gemm_kernel.plan_nt(a, b, sa, sb).name == want, f"{gbs} GB/s"


def test_plan_of_an_empty_problem(gemm_kernel):
    a, b, sa, sb = make_nt(16, 32, 0, seed=0)
    assert tuple(gemm_kernel.plan_nt(a, b, sa, sb)) == (-1, 0, "none")


def test_torch_compile_fullgraph(gemm_kernel):
    m, n, k = 128, 256, 512
    seed = fresh_seed()
    a, b, sa, sb = make_nt(m, n, k, seed=seed)

    def f(a, b, sa, sb):
        y = gemm_kernel.gemm_nt(a, b, sa, sb)
        z = gemm_kernel.gemm_nt(a, b, sa, sb, precision="exact")
        return y.float() + z.float()

    eager = f(a, b, sa, sb)
    compiled = torch.compile(f, fullgraph=True)(a, b, sa, sb)
    assert torch.equal(eager, compiled)


def test_torch_compile_dynamic_rows(gemm_kernel):
    """One compiled graph for every row count (decoding batches vary): the fake
    implementation's shapes stay symbolic, and each call matches eager bit for bit."""
    n, k = 576, 1024
    seed = fresh_seed()
    _, b, _, sb = make_nt(1, n, k, seed=seed)

    def f(a, b, sa, sb):
        return gemm_kernel.gemm_nt(a, b, sa, sb)

    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(f, backend=counter, fullgraph=True, dynamic=True)
    for m in (17, 64, 300):
        a, _, sa, _ = make_nt(m, n, k, seed=seed + m)
        assert torch.equal(compiled(a, b, sa, sb), f(a, b, sa, sb)), f"M={m} seed={seed}"
    assert counter.frame_count == 1, f"compiled {counter.frame_count} times for 3 row counts"


def test_torch_compile_reduce_overhead(gemm_kernel):
    """``mode="reduce-overhead"`` records the op into CUDA graphs (torch's graph trees)
    and replays them with new inputs."""
    m, n, k = 64, 2112, 7168  # split-K: two kernels and a workspace in the graph
    seed = fresh_seed()

    def f(a, b, sa, sb):
        return gemm_kernel.gemm_nt(a, b, sa, sb) * 2  # an Inductor kernel after the op (exact)

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, mode="reduce-overhead")
    for i in range(4):  # warm-up, recording, then replays
        a, b, sa, sb = make_nt(m, n, k, seed=seed + i)
        got = compiled(a, b, sa, sb).clone()
        assert torch.equal(got, f(a, b, sa, sb)), f"call {i} seed={seed}"


def check_graph_replay(gemm_kernel, m, n, k, seed, device=None):
    """Captures a fast and an exact call (MN-major operands) into one CUDA graph on
    ``device`` (the current one when None), replays it with new inputs copied into the
    captured tensors, and checks both outputs."""
    with torch.cuda.device(torch.cuda.current_device() if device is None else device):
        a, b, sa, sb = make_nt(m, n, k, seed=seed, a_major="mn", b_major="mn")
        out = poisoned(m, n)
        out2 = poisoned(m, n)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm up outside the capture
            gemm_kernel.gemm_nt(a, b, sa, sb, out)
            gemm_kernel.gemm_nt(a, b, sa, sb, out2, precision="exact")
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        # torch.cuda.graph's default capture stream is made once per process, on the
        # device current at the first capture: a capture for another device would capture
        # nothing of that device's work, so each capture names a stream of its device.
        with torch.cuda.graph(graph, stream=torch.cuda.Stream()):
            gemm_kernel.gemm_nt(a, b, sa, sb, out)
            gemm_kernel.gemm_nt(a, b, sa, sb, out2, precision="exact")
        a2, b2, sa2, sb2 = make_nt(m, n, k, seed=seed + 1, a_major="mn", b_major="mn")
        a.copy_(a2), b.copy_(b2), sa.copy_(sa2), sb.copy_(sb2)
        out.fill_(float("nan"))
        out2.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
    c = Checker(gemm_kernel, a, b, sa, sb, f"graph replay seed={seed}")
    c.fast(out)
    c.exact(out2)


def test_cuda_graph_capture(gemm_kernel):
    check_graph_replay(gemm_kernel, 200, 576, 1152, fresh_seed())


def test_runs_on_current_stream(gemm_kernel):
    m, n, k = 512, 1024, 2048
    seed = fresh_seed()
    a, b, sa, sb = make_nt(m, n, k, seed=seed)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        out = gemm_kernel.gemm_nt(a, b, sa, sb)
        done = torch.cuda.Event()
        done.record(s)
    done.synchronize()
    Checker(gemm_kernel, a, b, sa, sb, f"side stream seed={seed}").fast(out)


# Shapes on which the op launches each of its programmatic-dependent kernels (the plan is
# in the failure message): CUTLASS ping-pong, its split-K with the sum, the cluster
# split-K, the few-row kernel with its sum, the cooperative split-K, the hand-written
# 128x128 kernels, and exact mode's few-row and ping-pong kernels.
FOLLOW_CASES = [
    (64, 32768, 512, "fast"), (128, 4096, 7168, "fast"), (64, 2112, 7168, "fast"),
    (64, 7168, 16384, "fast"), (1024, 576, 7168, "fast"), (2048, 4096, 2048, "fast"),
    (4096, 4096, 2304, "fast"), (64, 2112, 7168, "exact"), (1024, 1024, 2048, "exact"),
]


@pytest.mark.parametrize("m,n,k,precision", FOLLOW_CASES)
def test_ordered_after_the_previous_kernel(gemm_kernel, m, n, k, precision):
    """Each GEMM launches while the kernel before it on the stream may still run (a
    programmatic dependent launch) and must neither read an input before that kernel has
    written it nor write its output before that kernel has read it. A is the tail of a
    256 MB buffer, so the kernel negating it in place (the whole buffer) writes A last.
    Even rounds: copy the output buffer, negate A, GEMM; odd rounds: negate A, copy the
    output buffer, GEMM. Each result must be the product of its round's inputs, and each
    copy the result of the round before, bit for bit."""
    seed = fresh_seed()
    a0, b, sa, sb = make_nt(m, n, k, seed=seed)
    plan = gemm_kernel.plan_nt(a0, b, sa, sb, precision=precision)
    what = f"{m}x{n}x{k} {precision} {plan} seed={seed}"
    buffer = torch.zeros((256 << 20) + m * k, dtype=torch.uint8, device="cuda")
    a = buffer[-m * k:].view(m, k).view(FN)
    a.copy_(a0)
    a_neg = a0.clone()
    a_neg.view(torch.uint8).bitwise_xor_(0x80)  # the sign bit: A negated exactly
    checkers = [Checker(gemm_kernel, x, b, sa, sb, what) for x in (a_neg, a0)]
    out = poisoned(m, n)
    copies, results = [], []
    for i in range(4):
        if i % 2 == 0:
            copies.append(out.clone())
            buffer.bitwise_xor_(0x80)  # the kernel right before the GEMM writes A
        else:
            buffer.bitwise_xor_(0x80)
            copies.append(out.clone())  # the kernel right before the GEMM reads out
        gemm_kernel.gemm_nt(a, b, sa, sb, out, precision=precision)
        results.append(out.clone())
    torch.cuda.synchronize()
    previous = poisoned(m, n)
    for i, (copy, result) in enumerate(zip(copies, results, strict=True)):
        assert torch.equal(copy.view(torch.int16), previous.view(torch.int16)), (
            f"round {i}: the output was written before the kernel before it read it ({what})")
        getattr(checkers[i % 2], precision)(result)
        previous = result


@pytest.mark.parametrize("m,n,k,layout", [
    (64, 2112, 7168, "nt"),          # CUTLASS split-K and the sum
    (128, 7168, 2048, "nt"),         # CUTLASS ping-pong
    (64, 7168, 16384, "nt"),         # hand-written few-row kernel
    (4096, 4096, 1024, "nt"),        # hand-written 128x128 kernel
    (1024, 1536, 7168, "challenge"), # operand preparation, then CUTLASS
])
def test_first_call_in_a_new_thread(gemm_kernel, m, n, k, layout):
    """A thread's first CUDA work is the op itself, on the default device, with every
    buffer served from torch's cache: the op must bind the device's context before it
    encodes TMA descriptors through the driver."""
    seed = fresh_seed()
    major = "mn" if layout == "challenge" else "k"
    a, b, sa, sb = make_nt(m, n, k, seed=seed, a_major=major, b_major=major)
    expected = gemm_kernel.gemm_nt(a, b, sa, sb)
    torch.cuda.synchronize()
    result: dict = {}

    def work():
        try:
            result["out"] = gemm_kernel.gemm_nt(a, b, sa, sb)
            torch.cuda.synchronize()
        except BaseException as err:  # reported by the test's thread
            result["error"] = err

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert "error" not in result, f"{result.get('error')!r} (seed={seed})"
    assert torch.equal(result["out"], expected), f"seed={seed}"


@pytest.mark.parametrize("dtype", [FN, NUZ])
@pytest.mark.parametrize("in_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,cols", [(1, 128), (17, 200), (300, 7168 + 64)])
def test_quantization_matches_reference(gemm_kernel, dtype, in_dtype, rows, cols):
    seed = fresh_seed()
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = (torch.randn(rows, cols, generator=g, device="cuda") * 3.0).to(in_dtype)
    x[0, : min(cols, 7)] = 0.0  # zero run inside a group
    ref = gemm_kernel.reference
    for fn, rfn in ((gemm_kernel.quantize_activation, ref.quantize_activation_reference),
                    (gemm_kernel.quantize_weight, ref.quantize_weight_reference)):
        q, s = fn(x, dtype)
        rq, rs = rfn(x, dtype)
        assert q.dtype == dtype and q.shape == x.shape
        assert torch.equal(s, rs), f"scales differ (seed={seed})"
        assert torch.equal(q.view(torch.uint8), rq.view(torch.uint8)), f"q differs (seed={seed})"


def assert_codes_like_reference(q, rq, dtype, what):
    """FP8 codes equal byte for byte to the reference's, except that where the reference
    has an e4m3fn NaN (0x7F / 0xFF) the kernel's may carry the other sign: both write the
    sign of the float NaN they cast, and a NaN's sign from a division is not something
    IEEE fixes. e4m3fnuz has a single NaN code, 0x80, compared as every other byte."""
    qb, rb = q.view(torch.uint8), rq.view(torch.uint8)
    if dtype == FN:
        nan = (rb & 0x7F) == 0x7F
        qb, rb = torch.where(nan, qb & 0x7F, qb), torch.where(nan, rb & 0x7F, rb)
    bad = int((qb != rb).sum())
    assert bad == 0, f"{bad} codes differ from the reference ({what})"


def assert_scales_like_reference(s, rs, what):
    """NaN where the reference is NaN, equal bits elsewhere (inf included)."""
    nan = torch.isnan(rs)
    assert torch.equal(torch.isnan(s), nan), f"NaN scales differ ({what})"
    assert torch.equal(s[~nan], rs[~nan]), f"scales differ ({what})"


@pytest.mark.parametrize("dtype", [FN, NUZ])
@pytest.mark.parametrize("in_dtype", [torch.float32, torch.bfloat16])
def test_quantization_keeps_nan_and_inf_like_reference(gemm_kernel, dtype, in_dtype):
    """NaN and +-inf quantize as the reference does (torch's amax and clamp keep NaN):
    a NaN makes its group's scale NaN and every code in it NaN; an infinity makes the
    scale inf, the group's finite values 0 and the infinity itself NaN (inf / inf). The
    NaN may sit in any lane, warp or tail group, so the reductions must carry it."""
    seed = fresh_seed()
    g = torch.Generator(device="cuda").manual_seed(seed)
    rows, cols = 300, 7168 + 64
    x = (torch.randn(rows, cols, generator=g, device="cuda") * 3.0).to(in_dtype)
    nan, inf = float("nan"), float("inf")
    # Coordinates: 1x128 group (row, col // 128); 128x128 tile (row // 128, col // 128).
    # The 1x128 kernel reduces over a warp's lanes, the 128x128 one over 8 warps too.
    x[0, 3] = nan  # group (0, 0), lane 3; tile (0, 0), warp 0
    x[1, 128 + 97] = inf  # group (1, 1), lane 1; tile (0, 1), warp 7
    x[2, 256 + 31] = -inf  # group (2, 2), lane 31; tile (0, 2), warp 0
    x[130, 200] = -nan  # group (130, 1); tile (1, 1), warp 2
    x[150, 7200] = nan  # the tail group (150, 56) of 64 columns; tile (1, 56)
    x[299, 7000] = inf  # the last row: tile (2, 54) of 44 rows, warp 6
    what = f"{dtype} {in_dtype} seed={seed}"
    ref = gemm_kernel.reference
    for fn, rfn, name in ((gemm_kernel.quantize_activation, ref.quantize_activation_reference,
                           "1x128"),
                          (gemm_kernel.quantize_weight, ref.quantize_weight_reference,
                           "128x128")):
        q, s = fn(x, dtype)
        rq, rs = rfn(x, dtype)
        assert_scales_like_reference(s, rs, f"{name} {what}")
        assert_codes_like_reference(q, rq, dtype, f"{name} {what}")
    # The semantics themselves, not only agreement (1x128 groups).
    q, s = gemm_kernel.quantize_activation(x, dtype)
    v = q.float()
    assert torch.isnan(s[0, 0]) and torch.isnan(v[0, :128]).all(), what
    assert torch.isnan(s[150, 56]) and torch.isnan(v[150, 7168:]).all(), what
    assert s[1, 1] == inf and torch.isnan(v[1, 128 + 97]), what
    others = torch.cat([v[1, 128:128 + 97], v[1, 128 + 98:256]])
    assert (others == 0).all(), what
    assert s[2, 2] == inf and torch.isnan(v[2, 256 + 31]), what
    assert torch.isfinite(s[3:130]).all() and torch.isfinite(v[3:130]).all(), what


def test_quantized_linear(gemm_kernel):
    """quantize_activation + quantize_weight + gemm_nt approximates x @ w.T."""
    seed = fresh_seed()
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(256, 1024, generator=g, device="cuda")
    w = torch.randn(512, 1024, generator=g, device="cuda")
    qa, sa = gemm_kernel.quantize_activation(x)
    qw, sw = gemm_kernel.quantize_weight(w)
    y = gemm_kernel.gemm_nt(qa, qw, sa, sw)
    d = gemm_kernel.reference.calc_diff(y, x.double() @ w.double().t())
    assert d < 1e-3, f"calc_diff {d} (seed={seed})"


def test_bad_input_on_gpu(gemm_kernel):
    a, b, sa, sb = make_nt(64, 128, 256, seed=fresh_seed())
    with pytest.raises(ValueError, match="b must be on"):
        gemm_kernel.gemm_nt(a, b.cpu(), sa, sb)
    with pytest.raises(ValueError, match="out must be on"):
        gemm_kernel.gemm_nt(a, b, sa, sb, torch.empty(64, 128, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="a_scale must have shape"):
        gemm_kernel.gemm_nt(a, b, sa.t(), sb)
    ops = gemm_kernel._ops.ops
    # The compiled op validates on its own: a direct call raises instead of crashing.
    with pytest.raises(ValueError, match="b_scale must have shape"):
        ops.gemm_nt(a, b, sa, sb[:, :1], False)
    with pytest.raises(TypeError, match="a must be float8"):
        ops.gemm_nt(a.float(), b, sa, sb, False)
    with pytest.raises(ValueError, match="out must have shape"):
        ops.gemm_nt_out(torch.empty(3, 3, dtype=torch.bfloat16, device="cuda"), a, b, sa, sb, False)
    with pytest.raises(ValueError, match="variant"):
        ops.gemm_nt(a, b, sa, sb, False, 3)
    # The process survived all of that and still computes.
    Checker(gemm_kernel, a, b, sa, sb, "after errors").fast(gemm_kernel.gemm_nt(a, b, sa, sb))
