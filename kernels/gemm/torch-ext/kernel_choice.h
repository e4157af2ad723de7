// The op's choice of kernel (pick_variant): a pure function of the problem's shape, the
// operands' traits (what the binding's traits_of reads off the tensors), the GPU's SM
// count and its memory bandwidth. Kept apart from the binding so that it builds without
// torch or a GPU: tests/test_gemm_kernel_choice.py checks its rules for the H100 and the
// H200 on any machine with a C++ compiler and the CUDA headers.
#pragma once

#include <algorithm>
#include <cstdint>

#if __has_include("gemm_api.h")
#include "gemm_api.h"
#else
#include "../gemm/gemm_api.h"
#endif

namespace kfgemm_choice {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Kernel choice from the problem's shape, the operands' layout and the GPU. Measured on
// H100 and H200 (NOTES.md: sweeps of every variant over the challenge and DeepSeek-V3
// shapes, v2 and v6; the hand-written kernel, v11; each rule's own comment below).
// "Where memory is slower": under 4 TB/s (the H100); "nothing to prepare": operands and
// scales usable as stored (Traits::in_place; column-major scales with K <= 512 are, v49).
// Fast mode, the first rule that applies:
//  - up to 64 rows with a B beyond the L2, or where memory is slower with K >= 7168 and
//    more than 3072 columns: the few-row kernel (v27, v46);
//  - long K with a small output (K >= 4096, M * N <= 600K) and a B of at most 64M
//    elements: up to 128 rows with a narrow B (N <= 3072 up to 64 rows, 2112 beyond)
//    and nothing to prepare, or where no slice count tiles K, the cluster split-K kernel
//    (v32, v47); otherwise (with M <= 128, a B of at most 32 or 40 column tiles) split-K,
//    K cut into slices of whole 128-blocks, so that the few output tiles are worked on
//    by enough SMs (FP32 partials, summed by a second kernel: only worth it while M * N
//    is small); as many slices as K allows where none gives the wanted unit count (v17);
//  - A stored MN-major with N <= 640, M >= 2048, under six waves: the hand-written
//    kernel reading A in place (v13, v14);
//  - more than 128 rows, nothing to prepare, K >= 4096: where memory is slower, CTA
//    pairs sharing B by multicast from four waves on, and with N >= 1024 the
//    hand-written kernel over one to four waves; on every GPU, with N >= 1024, the
//    hand-written kernel under one wave from 512 rows and more than a wave of 64x128
//    tiles (v46, v47);
//  - where memory is slower, more than 128 rows after a preparation launch with K from
//    1024 to 2048 over six to eleven waves: CUTLASS's cooperative kernel (v46);
//  - six or more waves of 128x128 tiles (and M > 128): the hand-written kernel, whatever
//    K; on CTA pairs sharing B where memory is slower with K >= 2304, on every GPU with
//    K <= 512, N >= 16384 and nothing to prepare, and where memory is faster with
//    K <= 512 and N >= 7168 from ten waves (v11, v12, v46, v52);
//  - 65-128 rows with K <= 1024 over a wave or more and nothing to prepare: the
//    hand-written kernel where memory is slower (v28), and where it is faster with
//    row-major scales and a last wave at least 60% full (v52); where memory is slower,
//    129-1024 rows whose 64x128 tiles fit in one wave, any K and layout: the ping-pong
//    kernel (v46);
//  - where memory is faster, more than 128 rows with K <= 512 over one to six waves,
//    nothing to prepare and row-major scales: the hand-written kernel (v52); after the
//    preparation launch with K from 385 to 512: CUTLASS's cooperative kernel (v52);
//  - short K (<= 512), few rows (M <= 128), or M <= 1024 with N <= 640: ping-pong 64x128
//    tiles, whose two consumer warp groups overlap one tile's epilogue with the next
//    tile's mainloop;
//  - long K (>= 4096) over two to five waves of 128x128 tiles whose last wave is at
//    most a quarter full (25% or less after rounding down to a whole percent): CUTLASS's
//    stream-K heuristic, which spreads that wave's work along K (4096x2112x7168: 122.6
//    vs 128.4 us; with more waves the tail matters less);
//  - otherwise CUTLASS's cooperative 128x128 kernel under its plain persistent
//    scheduler. It and the hand-written kernel start as a dependent launch after a
//    transpose (4-15% faster than the stream-K build of the same tile in data-parallel
//    mode; faster even on K-major inputs, where there is no launch to overlap:
//    4096x24576x1536 332 vs 375 us).
// (Interleaved A/B timings on H200, kernels/gemm/dev/ab.py; NOTES.md, v8. A swizzled
// tile order, `swizzle`, made no measurable difference and is left at CUTLASS's 1.)
// Exact mode, in order: the few-row kernel converting e4m3fn operands itself, up to 64
// rows, to 128 with a small B, to 256 with both operands K-major, N <= 4096 and K from
// 1024 to 2048, or to 256 where the kernels below cannot read the operands in place (v19,
// v46, v47, v48); the hand-written kernel converting e4m3fn operands read in place, split along K
// on at most half a wave with K >= 2048 or in two slices on one to one and a half waves
// (v22, v23); CUTLASS's BF16 split-K after the pass for small outputs with long K (v17);
// the hand-written kernel converting in place unsplit over a few waves (v20-v25); then
// on BF16 operands from the pass, the ping-pong kernel for few rows or up to 1024 rows
// with K <= 2304 or N <= 640, and the hand-written kernel beyond (v17).
// The 2x1-cluster variant (B multicast) is 2-6% faster on 4 of the 36 benchmark shapes but is
// left to explicit selection: compute-sanitizer's racecheck reports hazards on it
// (block-scale cp.async writes against the consumers' scale reads, ordered through
// barriers that also count the peer CTA's arrivals) that we could not rule out
// (NOTES.md, v5).
struct Choice {
  kfgemm::Variant variant;
  int splits;  // stream-K variants: 0 heuristic, 1 data-parallel, > 1 split-K;
               // split-K variants: number of K slices
};

// Whether `splits` slices of whole 128-blocks tile the (16-padded) K exactly.
inline bool splits_fit(int64_t Kp, int64_t splits) { return splits >= 2 && Kp % (128 * splits) == 0; }

// Smallest slice count that tiles K and gives at least `want` work units from `tiles`
// output tiles; where none does (up to 16 slices), the largest that tiles K, since more
// units still beat fewer there (H100, interleaved, us: 64x512x7168, 4 tiles, 12.5 with 8
// slices against 21.5 unsplit; NOTES.md, v17); 0 if no count tiles K.
inline int split_for(int64_t Kp, int64_t tiles, int64_t want) {
  int largest = 0;
  for (int s = 2; s <= 16; ++s) {
    if (!splits_fit(Kp, s)) continue;
    if (tiles * s >= want) return s;
    largest = s;
  }
  return largest;
}

// What the op's choice of kernel depends on besides the shape and the device.
struct Traits {
  bool exact;        // exact mode: 16-bit tensor cores
  bool fn_operands;  // both operands e4m3fn
  bool a_mn;         // A read MN-major in place (fast mode; mn_major_ok)
  bool amn_ok;       // both operands e4m3fn, A readable MN-major in place (mn_major_ok)
                     // and B MN-major or K-major (k_major_ok)
  bool ak_ok;        // both operands e4m3fn, A readable K-major in place (k_major_ok)
                     // and B K-major or MN-major
  bool b_k;          // B readable K-major in place (k_major_ok)
  bool in_place;     // operands and scales usable by the GEMM as they are: no
                     // preparation launch precedes it
  bool scales_rm;    // both block-scale matrices row-major along K (scales_row_major):
                     // the hand-written kernels read them without column-major misses
};

inline Choice pick_variant(int64_t M, int64_t N, int64_t K, const Traits& t, int sm_count, int mem_gbs) {
  using V = kfgemm::Variant;
  const bool exact = t.exact, fn_operands = t.fn_operands, a_mn_major = t.a_mn;
  const bool in_place = t.in_place;
  // Exact mode on e4m3fn operands that the GEMM converts itself, read in place: A
  // MN-major (the challenge's storage, both operands MN-major; variants 20, 21) or
  // K-major (the NT layout, and the guide's convention with B stored (K, N); 22, 23),
  // B either way.
  const bool cvt_in_kernel = t.amn_ok || t.ak_ok;
  const V cvt = t.amn_ok ? V::kFp8Coop128x128ExactAmn : V::kFp8Coop128x128ExactAk;
  const V cvt_split = t.amn_ok ? V::kFp8Coop128x128ExactAmnSplitK : V::kFp8Coop128x128ExactAkSplitK;
  const int64_t Kp = round_up(K, 16);
  const bool small_output = K >= 4096 && M * N <= 600 * 1024;
  const int64_t tiles64 = ceil_div(M, 64) * ceil_div(N, 128);
  const int64_t tiles128 = ceil_div(M, 128) * ceil_div(N, 128);
  const int64_t sms = std::max(sm_count, 1);
  const int64_t waves = tiles128 / sms;
  const bool slow_memory = mem_gbs > 0 && mem_gbs < 4000;  // the H100's 3.35 TB/s, not the H200's 4.8
  if (exact) {
    // Few rows in exact mode on e4m3fn operands: the few-row kernel converting B into FP16
    // fragments in registers and A into an FP16 copy in shared memory, which reads B once
    // as FP8 instead of converting it in a pass and reading it back at twice the bytes
    // (H100, interleaved, us, against the BF16 kernels the op took before v18:
    // 64x2112x7168 39.2 vs 21.8 (v18's build) and 20.8 (v19's), 64x7168x16384 235.7 vs
    // 88.4 and 71.4, 128x24576x1536 88.4 vs 57.3 and 41.7; v19's build against v18's in
    // one run: 1.04-1.38x on the 12 few-row DeepSeek-V3 shapes and 256x4096x7168 64.4 vs
    // 54.8, 256x7168x16384 240.2 vs 225.8; at 512 rows it ties with the BF16 kernels
    // (512x4096x7168 102.8 vs 103.3) and from 1024 it loses; NOTES.md, v18 and v19).
    // On the H100 the kernels converting both operands in the GEMM (20-23, below) are
    // faster from 129 rows on, and from 65 rows on where B is larger: with B K-major 16M
    // elements and more (from 24M with K >= 4096), with B MN-major (which the few-row
    // kernel has rewritten by a pass first) 4M (interleaved, us, against the few-row
    // kernel: NT 128x32768x512 19.6 vs 24.9, 128x24576x1536 35.6 vs 40.0, 128x7168x16384
    // 87.6 vs 110.4, 128x4096x7168 32.9 vs 35.1, 192x7168x2048 25.0 vs 34.8,
    // 256x2112x7168 34.4 vs 51.2, 256x24576x1536 46.7 vs 72.8; challenge 96x4608x7168
    // 39.9 vs 81.3, 96x7168x2048 25.6 vs 32.8, 128x1536x7168 28.6 vs 30.9; guide
    // 128x7168x2048 24.9 vs 33.0. With a smaller B the few-row kernel stays ahead up to
    // 128 rows: NT 128x2112x7168 26.2 vs 27.8, 128x7168x2048 21.2 vs 22.1, 128x4096x4096
    // 24.3 vs 25.9; challenge 128x512x7168 21.1 vs 41.7; and up to 64 rows whatever B:
    // NT 64x24576x1536 33.2 vs 35.7, 64x7168x16384 66.6 vs 82.3, challenge 64x1536x7168
    // 26.7 vs 28.6; NOTES.md, v46). The same holds on the H200, which took the few-row
    // kernel up to 256 rows whatever B before v48 (interleaved, us, against it: NT
    // 128x24576x1536 34.3 vs 40.0, 128x32768x512 17.9 vs 24.8, 128x7168x16384 86.9 vs
    // 110.4, 128x4096x7168 31.2 vs 33.9, 96x24576x1536 33.8 vs 40.2, 256x4608x2048 24.7 vs
    // 34.8, 192x7168x2048 24.9 vs 34.9, 256x2112x7168 34.8 vs 52.5, 256x24576x1536 46.8
    // vs 73.4; challenge 96x4608x7168 37.9 vs 75.1, 96x7168x2048 23.7 vs 30.3; guide
    // 128x7168x2048 22.1 vs 30.6; the few-row kernel ahead where the rule keeps it:
    // 128x2112x7168 26.2 vs 26.9, 128x7168x2048 20.6 vs 21.6, 128x4096x4096 24.0 vs 24.9,
    // 256x4096x2048 20.7 vs 22.2, 64x24576x1536 31.3 vs 34.2; NOTES.md, v48).
    const int64_t mi = 1024 * 1024;
    const bool small_b = t.b_k ? (N * K < 16 * mi || (K >= 4096 && N * K < 24 * mi))
                               : N * K < 4 * mi;
    // Both operands K-major (the NT layout) up to 256 rows with B of up to 4096 columns and
    // K from 1024 to 2048: the few-row kernel too (interleaved, us, against the kernels
    // converting in the GEMM: 256x4096x2048 20.8 vs 22.0, 192x4096x2048 20.7 vs 21.9,
    // 160x4096x2048 20.6 vs 21.8, 224x4096x2048 20.4 vs 22.1, 256x2048x2048 17.4 vs 19.8,
    // 256x1024x2048 14.6 vs 20.7, 256x3072x2048 20.7 vs 21.4, 256x2048x1536 16.0 vs 18.7,
    // 256x4096x1024 14.5 vs 15.5, 160x2048x1024 13.8 vs 15.4; with K = 512 it wins, ties
    // or loses (256x4096x512 10.6 vs 12.0, 160x2048x512 11.6 vs 11.3, 256x2048x512 11.8 vs
    // 11.0); with longer K or wider B it ties or loses: 256x4096x2304 23.0 vs 23.6, 256x4096x3072
    // 26.4 vs 26.6, 256x2112x4096 32.4 vs 26.6, 256x4608x2048 34.4 vs 25.0, 256x7168x1024
    // 21.5 vs 16.4; and with B MN-major: guide 256x4096x2048 28.5 vs 23.1; NOTES.md, v47).
    const bool nt_small = t.ak_ok && t.b_k && N <= 4096 && K >= 1024 && K <= 2048;
    if (fn_operands && M <= 256 &&
        (M <= 64 || !cvt_in_kernel || (M <= 128 && small_b) || nt_small)) {
      return {V::kFp8FewRowExact, 0};
    }
    // Long K on at most half a wave of tiles: variant 20 or 22 with each tile's K cut
    // into slices that fill one wave, summed in-kernel (v22; K-major, v23: 1024x576x7168
    // NT 34.3 vs 61.7 unsplit and 57.1 for the BF16 split-K kernel after the pass).
    // From K = 2048 too (interleaved, us, against variant 20 or 22 unsplit: H100
    // challenge 96x7168x2048 24.3 vs 26.4, 128x7168x2304 25.4 vs 28.1, NOTES.md, v46;
    // H200 challenge 96x7168x2048 23.7 vs 25.9, guide 128x7168x2048 22.1 vs 24.9, v48).
    if (cvt_in_kernel && K >= 2048 && tiles128 * 2 <= sms) {
      return {cvt_split, 0};
    }
    // Between one and one and a half waves of tiles, two slices per tile: three waves of
    // half-length units finish in the time of one and a half tiles, where the unsplit
    // grid takes two. With K >= 7168 that pays (H100, interleaved, us, against variant 20
    // unsplit: 6144x512x7168 challenge 114.5 vs 127.4, 3072x1024x7168 113.9 vs 125.8,
    // 4096x640x7168 113.0 vs 124.7; K-major, v23: 6144x512x7168 NT 117.4 vs 120.7); with
    // K = 4096 it ties (2048x1536x4096 74.6 vs 73.2), and from 1.8 waves, where the units
    // need four waves, it loses (6144x576x7168 149.1 vs 127.8; NOTES.md, v22).
    if (cvt_in_kernel && K >= 7168 && tiles128 > sms && tiles128 * 2 <= sms * 3) {
      return {cvt_split, 2};
    }
    if (small_output) {
      // BF16 k-blocks take twice as long: more slices pay off than for FP8.
      const int s = split_for(Kp, tiles64, M <= 128 ? 128 : 256);
      if (s > 0) return {V::kBf16Pingpong64x128SplitK, s};
    }
    // Both operands MN-major (the challenge's storage) over fewer than five waves of
    // tiles: the kernel that converts them inside its pipeline, with no preparation pass
    // (H100, interleaved, us, against the op's earlier choice: 1024x1536x7168 66.1 vs
    // 87.0, 6144x576x7168 127.4 vs 194.9, 6144x512x7168 131 vs 174.7, 1024x4096x512 17.7
    // vs 21.8, and K = 256 since v20's final build: 1024x7168x256 19.7 and 19.2 vs 20.1
    // for the pass and the BF16 ping-pong kernel). Its block loop is slower than variant
    // 17's (its consumers issue the conversions and store the FP16 copy of B), so the
    // preparation it saves stops paying on long grids. With K >= 1024 it still wins up to
    // eight waves (H100, interleaved in shuffled order, us, against the pass and variant
    // 17: 6144x3072x1536 123.4 vs 130.7, 4096x3072x2048 108.9 vs 120.2, 6144x2560x1024
    // 79.2 vs 81.1, 4096x4096x1536 110.6 vs 113.7) and loses beyond (6144x4608x7168
    // 920.7 vs 884.1, 6144x7168x2048 389.1 vs 355.1, 6144x7168x2304 424.7 vs 415.9);
    // with K <= 512 it loses there (6144x4096x512 69.2 vs 64.1). NOTES.md, v20-v22.
    // A K-major and B either way (variant 22, v23; H100, interleaved, us, against the BF16
    // kernels after the conversion pass): 1024x1536x7168 NT 63.1 vs 79.3, 512x4096x7168
    // 64.2 vs 103.4, 1024x4096x512 17.4 vs 20.8, 4096x2112x7168 290.1 vs 321.4,
    // 2048x7168x2048 (6.8 waves) 124.1 vs 135.4, 4096x4096x7168 (7.8) 502.0 vs 525.4;
    // even at 13.6 waves (4096x7168x2048 245.0 vs 243.0); B MN-major (the guide's
    // convention): 1024x1536x7168 66.1 vs 84.7, 4096x4096x7168 480.8 vs 527.0.
    // Those v23 timings of variants 20-23 came from builds that released a stage before
    // its A-fragment loads had returned (a race, NOTES.md, v24); without it, long K
    // beyond five waves loses in every layout (4096x4096x7168: NT 563.0 vs 524.0,
    // challenge 570.1 vs 534.3, guide 547.3 vs 527.6; NT 3072x4096x7168, 5.8 waves,
    // 418.9 vs 406.7), K = 2048 ties (NT 4096x4096x2048 145.8 vs 146.4), and under five
    // waves it still wins or ties (1024x1536x7168 NT 68.7 vs 81.0, guide 65.2 vs 85.9,
    // challenge 68.5 vs 87.1; 4096x2112x7168 guide 305.6 vs 323.4, challenge 310.4 vs
    // 325.9, NT 324.5 vs 321.6). So the extension to nine waves keeps to K <= 2304.
    // With memory of 4 TB/s and more (H200) the pass costs less, and the range shrinks
    // (H200, interleaved, us, against the pass and variant 17): long K wins under two
    // waves (1024x1536x7168 guide 65.3 vs 74.0, challenge 68.3 vs 74.9; 6144x576x7168
    // challenge, 1.8 waves, 128.8 vs 165.4) and loses from two (2048x2112x7168 NT 189.0
    // vs 167.1, 1024x4608x7168 NT 190.2 vs 180.8, 4096x2112x7168 NT 321.8 vs 278.3,
    // 6144x1536x7168 challenge 315.0 vs 295.8); K <= 2304 wins to five waves
    // (1024x7168x2304 challenge 89.0 vs 92.4, 1024x7168x256 19.3 vs 22.2) and loses at
    // eight (6144x3072x1536 challenge 131.4 vs 118.0). NOTES.md, v25.
    const bool cvt_pays = slow_memory ? waves < 5 || (waves < 9 && K >= 1024 && K <= 2304)
                                      : waves < 2 || (waves < 5 && K <= 2304);
    if (cvt_in_kernel && K >= 256 && cvt_pays) return {cvt, 0};
    if (M <= 128 || (M <= 1024 && (K <= 2304 || N <= 640))) {
      return {V::kBf16Pingpong64x128, 0};
    }
    // The hand-written kernel on BF16 operands, promotion overlapped with the next
    // block's MMAs: 5-28% faster than CUTLASS's cooperative builds (stream-K and
    // data-parallel) and its ping-pong one on every larger shape measured (H100,
    // interleaved, us: 4096x4096x7168 532.9 vs 576.4, 6144x7168x2304 challenge 412.7 vs
    // 480.1, 4096x24576x1536 616.1 vs 681.3 and 754.0 ping-pong, 6144x4096x512 challenge
    // 63.8 vs 74.0 and 88.1 ping-pong; with up to 1024 rows and short K the ping-pong
    // kernel stays ahead: 1024x4096x512 21.9 vs 23.2; NOTES.md, v17).
    return {V::kBf16Coop128x128Overlap, 0};
  }
  // A large B (N * K > 64M, e.g. 7168x16384) already streams near the bandwidth limit
  // unsplit (70% of the DRAM peak, Nsight Compute); the reduction only adds to it
  // (64x7168x16384 is as fast or faster unsplit in the H200 and H100 sweeps). With up to
  // 64 rows the few-row kernel takes it (below).
  // Few rows split only while B has at most 32 column tiles (40 where memory is faster):
  // with more, the unsplit kernel already keeps enough SMs streaming B and the slices'
  // reduction costs more than they gain (interleaved, us, unsplit against 2 slices:
  // H100 64x7168x4096 21.4 vs 23.8, 64x5120x7168 26.6 vs 27.5, at 32 tiles 64x4096x7168
  // 24.8 vs 23.6; H200 64x7168x7168 25.6 vs 26.8, 64x5120x7168 23.8 vs 22.3; NOTES.md,
  // v17).
  const bool few_rows = M <= 128;
  // Up to 64 rows with a B larger than the L2 (N * K > 64M bytes): the few-row kernel,
  // every SM streaming B through a deep ring, B's loads marked evict-first so that they
  // replace each other rather than lines other kernels left in the L2 (H200, interleaved,
  // us, against the ping-pong kernel the op took before: 64x7168x16384 41.8 vs 45.2,
  // 64x16384x8192 44.2 vs 47.0, 64x8192x8192 28.4 vs 29.6, 64x28672x4096 41.6 vs 42.6,
  // 64x4096x32768 47.4 vs 75.6 (32 column tiles: the ping-pong kernel kept 32 SMs
  // busy); below the L2's size it does not gain: 64x8192x4096 19.7 vs 18.2, 64x7168x7168
  // 25.1 vs 25.1; with 128 rows it loses: 128x7168x16384 47.9 vs 45.7; H100: 55.2 vs
  // 58.2, 59.2 vs 62.8, 35.6 vs 38.6, 53.2 vs 57.2, 62.4 vs 79.7 in the same order;
  // 64x8192x8192, exactly 64M, gains on both too but is left to the ping-pong kernel on
  // the H200: the rule keeps to a B beyond the L2; on the H100 the K >= 7168 clause
  // described next takes it; NOTES.md, v27).
  // On the H100 it also wins below the L2's size once K is long (K >= 7168) and B is
  // wider than the cluster split-K kernel's range (interleaved, us, against the op's
  // earlier choice, the ping-pong kernel with or without two slices: 64x4096x7168 22.4
  // vs 23.3, 64x3584x7168 20.9 vs 22.0, 64x5120x7168 25.6 vs 26.7, 64x6144x7168 27.5 vs
  // 28.6, 32x4096x7168 21.8 vs 22.9, 64x4096x16384 (exactly 64M) 36.3 vs 40.7; with
  // shorter K it loses: 64x4096x4096 17.4 vs 17.0, 64x4096x3072 15.9 vs 14.6; and with
  // more rows: 96x4096x7168 24.3 vs 23.8; NOTES.md, v46).
  if (M <= 64 && (N * K > 64 * 1024 * 1024 || (slow_memory && K >= 7168 && N > 3072))) {
    return {V::kFp8FewRow, 0};
  }
  // Few rows, a small output with long K and a narrow B (up to 3072 columns with up to 64
  // rows, 2112 with more): the cluster split-K kernel, whose slices sum through
  // distributed shared memory in the same launch. On the GPU it ties with CUTLASS's
  // split-K below (H100, interleaved, us, against the op's earlier choice: 64x2112x7168
  // 16.6 vs 16.5 and 16.5 vs 16.5 in another run, 128x2112x7168 18.5 vs 18.2 and 18.0
  // vs 18.2, 64x1024x7168 13.1 vs 13.6, 64x1536x7168 14.7 vs 15.4, 64x3072x7168 19.7 vs
  // 20.4, 128x1536x7168 15.6 vs 15.3, 64x2048x16384 25.8 vs 25.5, 16x2112x7168 16.4 vs
  // 16.2; with wider B it loses: 64x4096x4096 17.9 vs 17.2, 128x4096x7168 25.3 vs
  // 24.2). It needs neither the FP32 workspace nor the second launch, so a call takes
  // 9-10 us of host time instead of 15-17, and calls queued back to back run 10-40%
  // faster (64x2112x7168: 13.2 vs 17.6 us per call, 64x1024x7168 9.9 vs 16.4,
  // 128x2112x7168 15.1 vs 17.1; NOTES.md, v32).
  // That holds only with nothing to prepare: after the preparation launch (the
  // challenge's storage, the guide's) CUTLASS's split-K ping-pong kernel below is 4-20%
  // faster (H200, interleaved, us, against the cluster split-K kernel: challenge
  // 64x1536x7168 19.0 vs 20.9, 64x576x7168 14.9 vs 16.6, 128x512x7168 15.2 vs 19.0,
  // 64x3072x7168 26.2 vs 29.0, guide 64x1536x7168 18.4 vs 20.4; NT 64x1536x7168 12.9 vs
  // 13.8; with the rule built, challenge 64x1536x7168 19.2 vs 21.1, 128x512x7168 15.8 vs
  // 19.2; H100: challenge
  // 64x1536x7168 21.5 vs 24.1, 64x576x7168 15.6 vs 18.2, 128x512x7168 16.7 vs 20.0,
  // 64x2112x7168 26.3 vs 29.9, 64x3072x7168 29.7 vs 34.7, 128x1536x7168 22.9 vs 25.9,
  // 64x1024x7168 17.9 vs 21.1, 32x1536x7168 21.2 vs 24.2; guide 64x1536x7168 21.1 vs
  // 23.5; NT, nothing to prepare, 64x1536x7168 14.5 vs 14.9; NOTES.md, v47). Where no
  // slice count tiles K (K = 7168 + 64), the cluster kernel stays: it takes any K.
  if (few_rows && small_output && N * K <= 64 * 1024 * 1024 && N <= (M <= 64 ? 3072 : 2112) &&
      (in_place || split_for(Kp, tiles64, 64) == 0)) {
    return {V::kFp8ClusterSplitK, 0};
  }
  const int64_t max_split_cols = slow_memory ? 32 : 40;
  if (small_output && N * K <= 64 * 1024 * 1024 &&
      (!few_rows || ceil_div(N, 128) <= max_split_cols)) {
    // Few rows: 64-row ping-pong tiles, at least 64 units. More rows (N small): 128x128
    // cooperative tiles, at least 80 units (the sweep's best on 1024x512/576x7168).
    const int s = split_for(Kp, few_rows ? tiles64 : tiles128, few_rows ? 64 : 80);
    if (s > 0) return {few_rows ? V::kFp8Pingpong64x128SplitK : V::kFp8Coop128x128SplitK, s};
  }
  const int64_t last_wave = (tiles128 % sms) * 100 / sms;  // percent of a wave
  // A stored MN-major (the challenge's layout) with a narrow B (N <= 640) and many rows:
  // the hand-written kernel reading A in place, so that only the small B is rewritten
  // (interleaved, us, against the transpose and CUTLASS's kernel: H100 6144x576x7168
  // 87.2 vs 101.9; H200 76.0 vs 80.7, 6144x512x7168 70.2 vs 73.7; NOTES.md, v13 and
  // v14). Where B is large, or with six or more waves, its serialized blocks cost more
  // than the transpose saves (H100 6144x4608x7168 506 vs 410, 6144x1536x7168 179 vs
  // 160; H200 177.5 vs 157.7).
  if (a_mn_major && N <= 640 && M >= 2048 && waves < 6) {
    return {V::kFp8Coop128x128OverlapAmn, 0};
  }
  // Six or more waves of 128x128 tiles: the hand-written kernel, which overlaps the
  // scale promotion with the next block's MMAs and each tile's epilogue with the next
  // tile's first MMAs (H200, interleaved, us: 4096x7168x16384 833 vs 895 for CUTLASS's
  // cooperative kernel, 4096x24576x1536 284 vs 321, 4096x32768x512 160 vs 188 for the
  // ping-pong kernel; NOTES.md, v11). With fewer waves CUTLASS's kernels are as fast or
  // faster (6144x576x7168, under two waves: 80.5 vs 88.6).
  // On the H100, with nothing to prepare, the CTA pairs below are also the fastest over
  // four and five waves with K >= 4096 (interleaved, us, against the op's earlier choice
  // of CUTLASS's kernels: 4096x2112x7168 121.3 vs 126.8, 4096x2816x4096 86.3 vs 96.8,
  // 3072x3072x7168 124.8 vs 133.7, 4096x3072x4096 87.8 vs 99.6; 2048x4352x7168 122.3 vs
  // 121.2). After a preparation launch they are not (4096x2112x7168 challenge layout
  // 159.4 vs 155.4, 6144x1536x7168 170.1 vs 160.0). NOTES.md, v16.
  if (M > 128 && slow_memory && in_place && K >= 4096 && waves >= 4) {
    return {V::kFp8Coop128x128OverlapCluster2, 0};
  }
  // From one to four waves there, the hand-written kernel on single CTAs: faster than
  // CUTLASS's kernels or as fast (interleaved, us, against the op's earlier choice:
  // 1024x7168x16384 223.1 vs 248.5, 768x7168x16384 167.5 vs 187.5, 1024x4096x16384
  // 116.1 vs 131.0, 1024x7168x4096 58.3 vs 64.7, 2048x2112x7168 69.7 vs 72.4 for
  // stream-K; ties: 1024x7168x7168 98.0 vs 97.6, 1536x4096x7168 74.8 vs 74.6,
  // 1024x6144x7168 75.0 vs 75.6; NOTES.md, v46).
  // Also under one wave, from 512 rows and more than one wave of 64x128 tiles (fewer: the
  // ping-pong kernel below) (interleaved, us, against CUTLASS's cooperative kernel: 128
  // tiles 1024x2048x4096 19.9 vs 21.2 and 19.9 vs 21.6 in another run, 120
  // 1024x1920x4096 18.8 vs 20.7 and 768x2560x4096 19.5 vs 20.6, 112 896x2048x4096 18.7
  // vs 20.2 and 19.2 vs 20.8, 1024x2048x7168 28.8 vs 29.3, 1024x2048x16384 57.5 vs 62.3,
  // 96 768x2048x4096 19.0 vs 20.5 and 18.9 vs 20.4, 1024x1536x4096 18.2 vs 20.0 and 18.7
  // vs 19.9, 1536x1024x4096 18.7 vs 20.4, 80 640x2048x4096 18.8 vs 19.9 and 18.6 vs
  // 20.0; ties: 112 512x3584x4096 20.2 vs 20.8, 1024x1792x7168 27.8 vs 28.5, 96
  // 512x3072x7168 28.3 vs 28.5; with fewer rows it ties or loses, 384x4096x7168 31.2 vs
  // 30.9, 256x7168x7168 37.2 vs 36.4, 256x7168x4096 23.4 vs 23.1, though 384x4096x4096
  // 19.9 vs 20.7).
  // Neither holds with B narrower than 1024 columns (4096x512x4096 22.2 vs 21.4,
  // 8192x256x4096 27.1 vs 25.1 under a wave; 16384x256x4096 43.7 vs 41.5, 8192x512x7168
  // 57.9 vs 54.8, 8192x512x4096 36.6 vs 36.0 over one to two waves; NOTES.md, v47).
  // Under one wave that holds on the H200 too (interleaved, us: 1024x2048x4096 19.5 vs
  // 20.9, 640x2048x4096 18.4 vs 19.6, and with the rule built 896x2048x4096 18.9 vs 20.7,
  // 1024x1536x4096 18.2 vs 20.4; NOTES.md, v47).
  if (M > 128 && in_place && K >= 4096 && N >= 1024 &&
      ((slow_memory && tiles128 >= sms) || (tiles128 < sms && tiles64 > sms && M >= 512))) {
    return {V::kFp8Coop128x128Overlap, 0};
  }
  // On the H200 (4 TB/s and more), B of 256 to 1023 columns, K = 4096 (to 5119), two to
  // five waves, nothing to prepare: the hand-written kernel too (interleaved, us, against
  // the op's earlier choice, CUTLASS's kernels: 18432x512x4096 72.8 vs 81.0,
  // 24576x512x4096 89.0 vs 98.2, 16384x512x4096 59.4 vs 64.9, 36864x256x4096 79.6 vs
  // 85.5, 24576x256x4096 49.6 vs 51.3). It loses with a narrower B (36864x128x4096 62.1
  // vs 60.4), under two waves (16384x256x4096 36.1 vs 36.8) and from K = 5120
  // (36864x256x5120 101.9 vs 100.1; 18432x512x6144 108.0 vs 108.8, 36864x256x7168 136.2
  // vs 133.2); NOTES.md, v50. The H100 keeps the rules above (v47).
  if (M > 128 && mem_gbs >= 4000 && in_place && N >= 256 && N < 1024 && K >= 4096 &&
      K < 5120 && waves >= 2 && waves < 6) {
    return {V::kFp8Coop128x128Overlap, 0};
  }
  // On the H100, after the preparation launch (the challenge's storage, the guide's),
  // with K from 1024 to 2048 over six to eleven waves: CUTLASS's cooperative kernel
  // (interleaved, us, against the hand-written kernel: challenge 6144x3072x1536 67.3 vs
  // 71.0 and 67.4 vs 69.4 in another run, 8192x3072x1536 86.7 vs 92.3, 6144x4096x1536
  // 85.4 vs 88.7, 6144x3072x2048 83.9 vs 86.0, 6144x3072x1024 51.1 vs 52.1; guide
  // 6144x3072x1536 62.2 vs 63.9; from 13 waves it loses, 4096x7168x2048 126.9 vs 125.9,
  // 8192x4096x2048 147.0 vs 143.3, and at 20 they tie, 6144x7168x2048; with nothing to
  // prepare the hand-written kernel stays ahead, NT 6144x3072x1536 55.9 vs 57.3;
  // NOTES.md, v46).
  if (M > 128 && slow_memory && !in_place && K >= 1024 && K <= 2048 && waves >= 6 &&
      waves < 12) {
    return {V::kFp8Coop128x128, 0};
  }
  if (M > 128 && waves >= 6) {
    // On the H100 (3.35 TB/s) CTA pairs that load B once for both tiles (TMA multicast)
    // gain from K = 2304 on (interleaved, us: 4096x7168x16384 828 vs 865,
    // 6144x4608x7168 challenge 416 vs 457, 4096x4096x7168 206 vs 220, 6144x7168x2304
    // 209 vs 222) and lose 2-4% at K <= 2048; on the H200 (4.8 TB/s) they do not gain
    // (4096x7168x16384 857 vs 820, 4096x24576x1536 305 vs 281). NOTES.md, v12.
    // They also gain with short K (<= 512) and a wide B (N >= 16384), nothing to prepare
    // (interleaved, us: 4096x32768x512 154.7 vs 160.8, 2048x32768x512 79.6 vs 82.7,
    // 8192x32768x512 322.3 vs 341.3, 4096x16384x512 80.1 vs 81.9, 4096x32768x256 116.5
    // vs 122.3; with a narrow B they lose, 6144x4096x512 34.2 vs 33.4, and at K = 1024
    // too, 4096x32768x1024 271.9 vs 266.3; NOTES.md, v46), on the H200 as well (154.3 vs
    // 160.9, 316.9 vs 327.9, 2048x32768x512 77.6 vs 80.8, 4096x16384x512 78.1 vs 80.9,
    // 4096x32768x256 103.4 vs 111.6; 6144x4096x512 32.9 vs 33.1, 4096x32768x1024 280.3
    // vs 276.0; NOTES.md, v48).
    // On the H200 the CTA pairs gain with short K (<= 512), B of 7168 columns or more and
    // ten waves or more, whatever the layout (interleaved, us, against the hand-written
    // kernel on single CTAs: challenge 6144x7168x256 (20 waves) 42.2 vs 43.8, 42.4 vs
    // 43.8, 42.4 vs 43.6 and 42.2 vs 44.0 in other runs, guide 42.4 vs 43.5, NT 37.1 vs
    // 38.8, 8192x7168x256 47.0 vs 49.4 and 46.8 vs 49.4, 12288x7168x256 66.8 vs 70.4,
    // 8192x8192x256 52.3 vs 55.2, 6144x7168x512 51.1 vs 52.9, guide 58.1 vs 59.7,
    // 6144x10240x512 71.2 vs 74.6; 13.6 waves: 4096x7168x256 27.6 vs 28.2, challenge
    // 4096x7168x512 44.3 vs 45.0). At 6.8 waves they lose (2048x7168x384 20.7 vs 20.0;
    // nothing was measured between 6.8 and 13.6 waves), and with B of 4096 columns they
    // tie or lose (challenge 6144x4096x512 39.7 vs 39.7 and 39.8 vs 39.4, 4096x4096x256
    // 23.9 vs 23.5; NT 6144x4096x512 32.7 vs 33.1, 6144x4096x256 25.0 vs 25.2; guide
    // 8192x4096x512 47.8 vs 47.8); NOTES.md, v52.
    if ((slow_memory && K >= 2304) || (in_place && K <= 512 && N >= 16384) ||
        (!slow_memory && K <= 512 && N >= 7168 && waves >= 10)) {
      return {V::kFp8Coop128x128OverlapCluster2, 0};
    }
    return {V::kFp8Coop128x128Overlap, 0};
  }
  // 65-128 rows, K <= 1024, at least a wave of 128x128 tiles, nothing to prepare, on the
  // H100: the hand-written kernel, its 128-row tiles reading each B tile once, where the
  // ping-pong kernel's two 64-row tiles read it twice (interleaved, us, against the
  // ping-pong kernel: 128x32768x512 16.1 vs 17.2 and 15.3 vs 16.9 in another run,
  // 96x32768x512 16.0 vs 17.1, 80x32768x512 15.3 vs 16.9, 128x65536x512 25.7 vs 27.3,
  // 128x32768x256 12.4 vs 13.2, 128x32768x1024 23.7 vs 24.6, 100x24576x384 12.6 vs
  // 12.9; under a wave it ties or loses: 128x16384x512 11.8 vs 11.8, 128x8192x512 10.1
  // vs 9.4, 128x4096x512 9.3 vs 9.1; with longer K it loses: 128x24576x1536 27.4 vs
  // 25.5). On the H200 it ties (128x32768x512 13.9 vs 14.0-14.5). NOTES.md, v28.
  // With column-major scales read in place (K <= 512, scales_in_place) the two tie
  // (128x32768x512 17.2 vs 16.7 and 16.9 vs 17.6 in another run; NOTES.md, v49).
  if (M > 64 && M <= 128 && K <= 1024 && slow_memory && in_place && tiles128 >= sms) {
    return {V::kFp8Coop128x128Overlap, 0};
  }
  // On the H200 the hand-written kernel gains there only with row-major scales and a
  // last wave at least 60% full (or none left partial), where the SMs share the tiles
  // more evenly (interleaved, us, against the ping-pong kernel: 256 tiles, 94% of a
  // second wave, 128x32768x512 13.6 vs 14.3, 13.5 vs 14.1 and 13.5 vs 14.1 in other
  // runs, 96x32768x512 13.3 vs 13.8, 80x32768x512 13.3 vs 13.8, 128x32768x256 11.0 vs
  // 11.5, 128x32768x1024 19.3 vs 19.8, 128x32768x384 12.6 vs 12.6; 224 tiles (70%)
  // 128x28672x512 13.0 vs 13.7; 240 (82%) 128x30720x512 13.2 vs 13.6; 264 (two waves)
  // 128x33792x512 13.6 vs 14.5; 384 (91%) 128x49152x512 17.2 vs 17.9; 512 (88%)
  // 128x65536x512 20.8 vs 21.6, though 96x65536x256 15.6 vs 15.2). With a last wave
  // under half full it loses (192 tiles, 45%: 100x24576x384 11.8 vs 10.9,
  // 128x24576x1024 17.4 vs 16.7, 128x24576x512 12.8 vs 12.2; 320 tiles, 42%:
  // 128x40960x512 16.4 vs 16.2), and so it does with column-major scales read in place
  // (128x32768x512 14.8 vs 14.2). The 60% line lies between 45% and 70%, where nothing
  // was measured; NOTES.md, v52.
  const int64_t partial = tiles128 % sms;
  if (M > 64 && M <= 128 && K <= 1024 && !slow_memory && in_place && t.scales_rm &&
      tiles128 >= sms && (partial == 0 || partial * 100 >= sms * 60)) {
    return {V::kFp8Coop128x128Overlap, 0};
  }
  // On the H200, short K (<= 512) over one to six waves with nothing to prepare and
  // row-major scales: the hand-written kernel, where the ping-pong kernel below was the
  // choice (interleaved, us: 6144x2048x512 19.7 vs 22.6, 4096x2048x512 15.3 vs 17.6,
  // 2048x4096x512 15.3 vs 17.8, 3072x4096x256 15.6 vs 17.1, 1536x7168x256 15.3 vs 16.0,
  // 1024x7168x256 12.2 vs 12.6, 2048x2048x512 10.9 vs 12.5). After the preparation
  // launch it loses (challenge 1024x7168x256 16.9 vs 15.1, 1024x4096x512 16.3 vs 14.8;
  // guide 4096x2048x512 20.1 vs 19.8); NOTES.md, v52.
  if (M > 128 && !slow_memory && in_place && t.scales_rm && K <= 512 && tiles128 >= sms) {
    return {V::kFp8Coop128x128Overlap, 0};
  }
  // After the preparation launch the H200 takes CUTLASS's cooperative kernel there with
  // K from 385 to 512 (measured at 512) over one to six waves (interleaved, us, against
  // the ping-pong kernel: challenge 1024x4096x512 14.3 vs 14.9, 14.5 vs 14.9 and 14.5
  // vs 15.0 in other runs, 2048x4096x512 20.3 vs 20.8 in two runs; guide 4096x2048x512
  // 19.4 vs 19.8 in two runs and 19.6 vs 19.9). With shorter K the ping-pong kernel
  // stays ahead (challenge 1536x4096x384 16.4 vs 16.0, 1024x7168x256 16.5 vs 15.1,
  // guide 2048x4096x256 16.1 vs 15.6 and 16.4 vs 15.9; NOTES.md, v52).
  if (M > 128 && !slow_memory && !in_place && K > 384 && K <= 512 && tiles128 >= sms) {
    return {V::kFp8Coop128x128, 0};
  }
  // On the H100, 129-1024 rows whose 64x128 tiles fit in one wave (where 128x128 tiles
  // leave half the SMs idle): the ping-pong kernel (interleaved, us, against CUTLASS's
  // cooperative kernel: 256x4096x7168 25.2 vs 29.7, 256x3072x7168 23.5 vs 27.8,
  // 512x1536x7168 22.0 vs 26.1, 256x4096x2048 12.8 vs 13.3, challenge 256x4096x7168
  // 44.4 vs 48.0; beyond one wave of 64x128 tiles it loses: 256x7168x7168 41.5 vs 36.3,
  // 384x4096x7168 39.7 vs 31.3; NOTES.md, v46). Small outputs with long K keep their
  // split-K kernels above.
  if (M > 128 && M <= 1024 && slow_memory && tiles64 <= sms) return {V::kFp8Pingpong64x128, 0};
  if (K <= 512 || M <= 128 || (M <= 1024 && N <= 640)) return {V::kFp8Pingpong64x128, 0};
  if (K >= 4096 && waves >= 2 && waves < 5 && last_wave <= 25) {
    return {V::kFp8Coop128x128StreamK, 0};
  }
  return {V::kFp8Coop128x128, 0};
}

}  // namespace kfgemm_choice
