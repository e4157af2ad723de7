// FP8 block-scaled GEMM for Hopper, written directly on TMA, mbarriers and wgmma (no
// CUTLASS collective), whose point is to keep the tensor cores busy while the block
// scales are applied.
//
//   D[m, n] = sum_k A[m, k] B[n, k] sfa[m, k/128] sfb[n/128, k/128]
//
// CUTLASS's blockwise mainloop runs the MMAs of one 128-deep K block into a temporary
// accumulator, waits for them (warpgroup_wait<0>) and only then folds the temporary into
// the FP32 accumulator times the block's scales; the tensor cores idle during that
// promotion (75% tensor-pipe utilisation in Nsight Compute, NOTES.md). Here each consumer
// warp group owns two temporaries: it issues the MMAs of block k into one, then promotes
// block k-1 from the other while they run (warpgroup_wait<1>). The cost is registers:
// 3 x 64 accumulators per thread, which the consumers get through setmaxnreg.
//
// Layout of the work:
//  - one CTA per SM, persistent over 128x128 output tiles (grouped order: 8 tile rows at
//    a time walk across N, so that a wave of CTAs shares A and B tiles in L2);
//  - warp group 0, one thread: TMA loads of A (128x128 bytes) and B (128x128) per K
//    block into a ring of stages (128-byte swizzle, the layout wgmma reads);
//  - warp groups 1 and 2: 64 rows of the tile each, wgmma m64n128k32; block scales read
//    from global memory two blocks ahead of their use (row-major scales: a 32-byte
//    sector serves 8 blocks from L1; the op copies other layouts row-major first where
//    K has more than four blocks);
//  - a tile's last block is followed by the next tile's first MMAs, and only then by
//    the last promotion and the epilogue (bf16 into shared memory with stmatrix, the
//    whole 64x128 half tile at once, stored by TMA), so the tensor cores have work while
//    the consumers store.
//
// Status (NOTES.md, v9 to v11): the op picks it over six or more waves of tiles (H200,
// interleaved: 4096x7168x16384 833 vs 895 us for CUTLASS's cooperative kernel, cuBLASLt
// 853; 4096x32768x512 160 vs 188 for the ping-pong kernel). What made the first version
// 25-30% slower than CUTLASS was the consumer warps' instruction stream, not the tensor
// cores: Nsight Compute's per-instruction samples showed them never waiting for the
// MMAs, about 170 instructions per K block against CUTLASS's 120 (now about 126), and
// the block-scale loads' latency exposed every block.
//
// Built also for A stored MN-major (variants 13, 14; NOTES.md, v13): TMA loads A's
// (K, M) storage and the consumers build its wgmma fragments in registers
// (load_a_fragment), one block at a time; B comes K-permuted from the preparation.
// And with each tile's K blocks split into slices (variants 15, 16; NOTES.md, v15),
// whose partial tiles the last slice to arrive adds in slice order (split_store).
// And on BF16 operands for exact mode (variant 17; NOTES.md, v17): the same pipeline with
// each K block as two 128-byte sub-tiles per operand and 8 k16 MMAs, 3 stages.
// And in exact mode on FP8 operands both stored MN-major, converted inside the pipeline
// (variant 20; NOTES.md, v20): A into FP16 register fragments (load_a_fragment_f16), B
// into FP16 copies in shared memory that 16-bit wgmma reads MN-major, no preparation
// pass. Its block loop takes about 1.25 us (variant 17's 1.0): the consumer warps that
// feed the MMAs also issue the 16384 conversions of each block (64 F2FP and about 220
// instructions per thread), and moving B's conversions to the integer pipes made it
// slower. So it gains where the grid is short and loses to variant 17 after the
// preparation pass once every SM is busy for many waves. B may also be stored K-major
// (its FP16 copy K-major then).
// And the same for A stored K-major (variants 22 and 23: the NT layout, and the guide's
// convention with B stored (K, N)): A's FP16 fragments from plain ldmatrix
// (load_a_fragment_f16_k), B's FP16 copy K-major or MN-major as B is stored, with each 16
// of K in the order those fragments take it.
//
// Operands as in GemmArgs: A (m, k) and B (n, k) K-major with 16-byte aligned row
// pitches, k padded to a multiple of 16 with zeros. TMA fills rows and columns past the
// ends with zeros, so partial tiles need no special casing in the mainloop.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "cute/arch/mma_sm90_gmma.hpp"
#include "gemm_api.h"
#include "sm90_ptx.cuh"

namespace kfgemm::overlap {
namespace {

using namespace kfgemm::sm90;

constexpr int kBlockM = 128;
constexpr int kBlockN = 128;
constexpr int kBlockK = 128;  // elements of K per stage = one scale block
constexpr int kThreads = 384;  // producer warp group + two consumer warp groups
constexpr int kGroupRows = 8;  // tile rows per band of the tile order
// Output staging per consumer warp group: its 64x128 half tile as two 64x64 bf16 boxes
// in the 128-byte swizzle, written to global memory by TMA.
constexpr uint32_t kOutBoxBytes = 64 * 64 * 2;
constexpr uint32_t kOutBytes = 2 * 2 * kOutBoxBytes;
static_assert(kOutBoxBytes % 1024 == 0, "output boxes stay 1024-byte aligned");

// Exact mode on e4m3fn operands converted to FP16 inside the pipeline: not at all, or
// with A stored MN-major (variants 20, 21) or K-major (22, 23) and B stored MN-major or
// K-major: both MN-major, both K-major, A K-major with B MN-major, A MN-major with B
// K-major.
enum class Cvt : int { kNone = 0, kMn = 1, kK = 2, kKMn = 3, kMnK = 4 };

// How a build reads its operands, for the kernel and its launcher alike.
template <bool kAmn, Cvt kCvt>
struct Reads {
  // Variants 20-23: FP8 operands read in place with their real extents, converted here.
  static constexpr bool kConvert = kCvt != Cvt::kNone;
  // A's stage MN-major (variants 13, 14, 16, 20, 21), its fragments built in registers.
  static constexpr bool kAmnRead = kAmn || kCvt == Cvt::kMn || kCvt == Cvt::kMnK;
  // B's stage MN-major and its FP16 copy read MN-major (variants 20-23).
  static constexpr bool kBmnCopy = kCvt == Cvt::kMn || kCvt == Cvt::kKMn;
  // A's fragments from K-major storage, in load_a_fragment_f16_k's K order, which B's
  // copy follows (variants 22, 23).
  static constexpr bool kPermK = kCvt == Cvt::kK || kCvt == Cvt::kKMn;
};

// Shared-memory layout per operand type. A stage holds a 128-deep K block of the A and B
// tiles, each as 128-byte rows of K in the 128-byte swizzle (the layout wgmma reads): one
// such sub-tile for FP8, two for BF16 (K elements 0-63, then 64-127), loaded by one TMA
// box each. BF16 stages are twice as large, so there are half as many (the same bytes in
// flight, and each block's MMAs take twice as long). kCvt (variants 20-23): FP8 stages
// of A and B, and two FP16 copies of B's block (written for block k+1 while block k's
// MMAs read the other), each as two halves of 16 KB: 64 columns of N by 128 rows of K
// (B stored MN-major), or 64 of K by 128 rows of N (B stored K-major).
template <bool kBf16, Cvt kCvt = Cvt::kNone>
struct Smem {
  static constexpr int kElemBytes = kBf16 ? 2 : 1;
  static constexpr int kSubTiles = kBf16 ? 2 : 1;       // 128-byte sub-tiles per K block
  static constexpr int kSubK = kBlockK / kSubTiles;     // K elements per sub-tile row
  static constexpr uint32_t kTileABytes = kBlockM * kBlockK * kElemBytes;
  static constexpr uint32_t kTileBBytes = kBlockN * kBlockK * kElemBytes;
  static constexpr uint32_t kSubABytes = kTileABytes / kSubTiles;
  static constexpr uint32_t kSubBBytes = kTileBBytes / kSubTiles;
  static constexpr uint32_t kStageBytes = kTileABytes + kTileBBytes;
  static constexpr uint32_t kCopyHalfBytes = kCvt != Cvt::kNone ? kBlockK * 64 * 2 : 0;
  static constexpr uint32_t kCopyBytes = 2 * kCopyHalfBytes;
  static constexpr int kStages = kBf16 ? 3 : kCvt != Cvt::kNone ? 4 : 6;
  // Tiles, B copies, output staging, barriers (full and empty per stage), and slack to
  // align the tiles to 1024 bytes (the 128-byte swizzle atom).
  static constexpr size_t kBytes =
      kStages * kStageBytes + 2 * kCopyBytes + kOutBytes + 2 * kStages * sizeof(uint64_t) + 1024;
  static_assert(kBytes <= 227 * 1024, "shared memory of one SM");
  static_assert(kSubABytes % 1024 == 0 && kSubBBytes % 1024 == 0, "1024-byte aligned sub-tiles");
};

using Mma = cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_SS_TN<>;
using MmaRs = cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_RS_TN<>;
using MmaBf16 = cute::SM90::GMMA::MMA_64x128x16_F32BF16BF16_SS<cute::SM90::GMMA::Major::K,
                                                               cute::SM90::GMMA::Major::K>;
// Variant 20: A from FP16 registers, B an MN-major FP16 copy in shared memory.
using MmaF16Mn = cute::SM90::GMMA::MMA_64x128x16_F32F16F16_RS<cute::SM90::GMMA::Major::K,
                                                              cute::SM90::GMMA::Major::MN>;
// Variant 22: the same with B's FP16 copy K-major.
using MmaF16K = cute::SM90::GMMA::MMA_64x128x16_F32F16F16_RS<cute::SM90::GMMA::Major::K,
                                                             cute::SM90::GMMA::Major::K>;

// The MMAs of one K block into `t`, overwriting it: 4 x k32 for FP8; 8 x k16 for BF16,
// the second four in the second 128-byte sub-tiles (`sub_a`, `sub_b` further on, in
// descriptor units). A step is 32 bytes along a row either way.
template <bool kBf16>
__device__ __forceinline__ void issue_block(float (&t)[64], uint64_t da, uint64_t db,
                                            uint32_t sub_a, uint32_t sub_b) {
  fence_regs(t);
  cute::warpgroup_arrive();
  if constexpr (kBf16) {
#pragma unroll
    for (int kk = 0; kk < kBlockK / 16; ++kk) {
      const uint32_t h = kk / 4, j = kk % 4;
      mma<MmaBf16>(da + h * sub_a + 2 * j, db + h * sub_b + 2 * j, t, kk > 0);
    }
  } else {
#pragma unroll
    for (int kk = 0; kk < kBlockK / 32; ++kk) {
      mma<Mma>(da + 2 * kk, db + 2 * kk, t, kk > 0);
    }
  }
  cute::warpgroup_commit_batch();
}

// The same with A from registers: `f` holds the thread's A fragment of each k32 step
// (four words per step, see load_a_fragment).
__device__ __forceinline__ void issue_block_rs(float (&t)[64], const uint32_t (&f)[16], uint64_t db) {
  fence_regs(t);
  cute::warpgroup_arrive();
#pragma unroll
  for (int kk = 0; kk < kBlockK / 32; ++kk) {
    mma_rs<MmaRs>(f[4 * kk], f[4 * kk + 1], f[4 * kk + 2], f[4 * kk + 3], db + 2 * kk, t, kk > 0);
  }
  cute::warpgroup_commit_batch();
}

// A stored MN-major (the challenge's layout) arrives by TMA as 128 rows of K, each the
// tile's 128 bytes of M in the 128-byte swizzle. FP8 wgmma reads only K-major operands
// from shared memory, so the consumers build A's register fragment themselves:
// ldmatrix.trans works on 16-bit pairs, and for the warp's 16 rows of M and a k32 step it
// gives thread (g = lane / 4, t = lane % 4) the bytes of M rows 2g and 2g+1 at K rows
// {2t, 2t+1} (first word) and {8+2t, 9+2t} (second word), and the same 16 rows higher up
// in the third and fourth. Two byte permutes per pair make them the fragment's words:
// fragment row g is M row 2g, fragment row g+8 is M row 2g+1 (the epilogue and the
// scales follow that order), and the K slots 4t..4t+3 hold K {2t, 2t+1, 8+2t, 9+2t}.
// That K order must match B's: the operand preparation writes B with each 16 of K in
// this order (OperandPrep::kperm16). Each ldmatrix phase reads 8 consecutive K rows at
// one 16-byte chunk: 8 different bank groups under the swizzle, no conflicts.
__device__ __forceinline__ void load_a_fragment(uint32_t (&f)[16], uint32_t addr) {
#pragma unroll
  for (int kk = 0; kk < kBlockK / 32; ++kk) {
    uint32_t r0, r1, r2, r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr + kk * 32 * kBlockM)
                 : "memory");
    f[4 * kk + 0] = __byte_perm(r0, r1, 0x6420);
    f[4 * kk + 1] = __byte_perm(r0, r1, 0x7531);
    f[4 * kk + 2] = __byte_perm(r2, r3, 0x6420);
    f[4 * kk + 3] = __byte_perm(r2, r3, 0x7531);
  }
}

// Two FP8 (e4m3fn) values, half `h` of the word `w` (low byte first), as an FP16 pair.
// Through a 16-bit register half, so that the conversion reads the upper half directly
// (F2FP's .H1 operand) instead of after a shift: 32 fewer instructions per thread and
// block. (The few-row kernel keeps the shift: there this form makes ptxas spill.)
__device__ __forceinline__ uint32_t e4m3x2_to_half2(uint32_t w, int h) {
  uint32_t r;
  if (h == 0) {
    asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, lo;\n}" : "=r"(r) : "r"(w));
  } else {
    asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, hi;\n}" : "=r"(r) : "r"(w));
  }
  return r;
}

// Variant 20: the FP16 A fragments of a whole block (8 k16 steps, four words each) from
// the MN-major FP8 stage. load_a_fragment's words hold, per k32 step, M row 2g's bytes
// at K {2t, 2t+1, 8+2t, 9+2t} (and {16+..} in the third word), row 2g+1's in the second
// and fourth: converted two at a time they are the FP16 fragment's words for fragment
// rows g (M row 2g) and g+8 (M row 2g+1) at K columns {2t, 2t+1} and {8+2t, 9+2t}, in
// plain K order.
__device__ __forceinline__ void load_a_fragment_f16(uint32_t (&f)[32], uint32_t addr) {
  uint32_t w[16];
  load_a_fragment(w, addr);
#pragma unroll
  for (int q = 0; q < 8; ++q) {  // k16 step q: words 2q (row 2g) and 2q + 1 (row 2g + 1)
    f[4 * q + 0] = e4m3x2_to_half2(w[2 * q], 0);
    f[4 * q + 1] = e4m3x2_to_half2(w[2 * q + 1], 0);
    f[4 * q + 2] = e4m3x2_to_half2(w[2 * q], 1);
    f[4 * q + 3] = e4m3x2_to_half2(w[2 * q + 1], 1);
  }
}

// Variant 22: the FP16 A fragments of a whole block from the K-major FP8 stage (128
// rows of 128 bytes of K, 128-byte swizzle). Plain ldmatrix on 16-bit pairs gives thread
// (g = lane / 4, t = lane % 4), for the warp's rows g and g + 8 and a 16-byte chunk of K,
// the bytes at K 4t..4t+3 of that chunk. Converted two at a time they fill the FP16
// fragment's K slots {2t, 2t+1} (bytes 4t, 4t+1) and {8+2t, 9+2t} (bytes 4t+2, 4t+3):
// slot 2t + j holds K 4t + j and slot 8 + 2t + j holds K 4t + 2 + j, an order B's copy
// follows (convert_b). One x4 load covers two k16 steps: rows g and g + 8 of chunk 2q,
// then of chunk 2q + 1; lane l addresses row l % 8 + 8 ((l / 8) % 2) of chunk 2q + l / 16.
// `addr` is that lane's row with its chunk-parity bit, `x6` its row's swizzle bits 1-2
// ((2q + h) ^ r = ((2q) ^ (r & 6)) + (h ^ (r & 1))). Each phase reads 8 rows at 8
// different chunks under the swizzle: no bank conflicts.
__device__ __forceinline__ void load_a_fragment_f16_k(uint32_t (&f)[32], uint32_t addr, uint32_t x6) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t r0, r1, r2, r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr + (((2u * q) ^ x6) << 4))
                 : "memory");
    f[8 * q + 0] = e4m3x2_to_half2(r0, 0);
    f[8 * q + 1] = e4m3x2_to_half2(r1, 0);
    f[8 * q + 2] = e4m3x2_to_half2(r0, 1);
    f[8 * q + 3] = e4m3x2_to_half2(r1, 1);
    f[8 * q + 4] = e4m3x2_to_half2(r2, 0);
    f[8 * q + 5] = e4m3x2_to_half2(r3, 0);
    f[8 * q + 6] = e4m3x2_to_half2(r2, 1);
    f[8 * q + 7] = e4m3x2_to_half2(r3, 1);
  }
}

// acc += t * scale; accumulator element i sits in row +0 (i % 4 < 2) or +8 of the
// thread's pair of rows.
__device__ __forceinline__ void promote(float (&acc)[64], const float (&t)[64], float s_lo,
                                        float s_hi) {
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = fmaf(t[i], (i % 4 < 2) ? s_lo : s_hi, acc[i]);
}

struct TileCoord {
  int m0, n0;
};

// Split-K (variants 15, 16): each tile's K blocks are cut into `splits` slices of
// nearly equal length, one work unit each. `partials` holds an FP32 partial half tile
// per (tile, slice, warp group), `counters` one arrival count per (tile, warp group),
// zero at launch (split_layout).
struct SplitParams {
  int splits;
  float* partials;
  uint32_t* counters;
};

// Work unit t of a cluster: kCluster tiles stacked along M (the same B tile), ordered
// in bands of kGroupRows unit rows that walk across N; `rank` picks the CTA's tile.
template <int kCluster>
__device__ __forceinline__ TileCoord tile_coord(int t, int units_m, int tiles_n, int rank) {
  const int band_tiles = kGroupRows * tiles_n;
  const int band = t / band_tiles;
  const int within = t - band * band_tiles;
  const int rows = min(kGroupRows, units_m - band * kGroupRows);
  return {((band * kGroupRows + within % rows) * kCluster + rank) * kBlockM,
          (within / rows) * kBlockN};
}

// Arrival on the mbarrier at shared-memory offset `bar` of CTA `rank` in the cluster,
// with the default (CTA-scope release) semantics: what it orders are this warp's
// completed wgmma reads of the stage. A cluster-scope release would also wait for the
// scale loads in flight (an L2 round trip per block: 3x slower, measured).
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}" ::"r"(bar),
      "r"(rank)
      : "memory");
}

// The box at (c0, c1) of `map` into shared memory offset `dst` of every CTA in `mask`,
// completing its bytes on each one's mbarrier at offset `bar`.
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const CUtensorMap* map,
                                                      uint32_t bar, int c0, int c1, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
}

// ---- the kernel -----------------------------------------------------------------------

// kCluster = 1: one CTA per tile. kCluster = 2: CTA pairs on vertically adjacent tiles,
// each loading its own A tile and half of the shared B tile, multicast to both; a stage
// is free once the consumers of both CTAs have released it. kAmn: A stored MN-major, its
// fragments built in registers (load_a_fragment), B in the matching K order.
template <int kCluster, bool kAmn, bool kSplit, bool kBf16, Cvt kCvt>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const __grid_constant__ CUtensorMap map_d, const ProblemParams p, const SplitParams sp) {
  static_assert(!kSplit || kCluster == 1, "split-K runs on single CTAs");
  static_assert(!kBf16 || (kCluster == 1 && !kAmn && !kSplit), "BF16 runs on single CTAs, K-major");
  static_assert(kCvt == Cvt::kNone || (kCluster == 1 && !kAmn && !kBf16),
                "variants 20 to 23 run on single CTAs");
  // A's wgmma fragments built in registers (variants 13, 14, 16, 20-23), from MN-major
  // storage (all but 22 and 23).
  using R = Reads<kAmn, kCvt>;
  constexpr bool kAfrag = kAmn || R::kConvert;
  constexpr bool kAmnRead = R::kAmnRead;
  constexpr bool kBmnCopy = R::kBmnCopy;
  constexpr bool kPermK = R::kPermK;
  using L = Smem<kBf16, kCvt>;
  constexpr int kStages = L::kStages;
  constexpr uint32_t kStageBytes = L::kStageBytes;
  extern __shared__ uint8_t smem_raw[];
  // Split-K: whether this warp group's half tile is the last of its slices to arrive.
  __shared__ uint32_t split_last[2];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t tiles_base = (raw + 1023) & ~1023u;
  // Tiles and output boxes 1024-byte aligned (the swizzle atom), then the barriers.
  const uint32_t copies = tiles_base + kStages * kStageBytes;  // variant 20's B copies
  const uint32_t out_base = copies + 2 * L::kCopyBytes;
  const uint32_t bars = out_base + kOutBytes;
  auto full_bar = [&](int s) { return bars + 8 * s; };
  auto empty_bar = [&](int s) { return bars + 8 * (kStages + s); };
  auto tile_a = [&](int s) { return tiles_base + s * kStageBytes; };
  auto tile_b = [&](int s) { return tiles_base + s * kStageBytes + L::kTileABytes; };

  // Registers per thread after setmaxnreg. The consumers' increase is taken from what the
  // producer gives back out of the launch's 168 per thread (65536 / 384, rounded down to
  // 8): with more asked than given, setmaxnreg.inc waits forever. With A fragments in
  // registers the consumers need 240 (232 spills more), so the producer keeps 24.
  constexpr uint32_t kProducerRegs = kAfrag ? 24 : 40;
  constexpr uint32_t kConsumerRegs = kAfrag ? 240 : 232;
  static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= kThreads * 168,
                "setmaxnreg asks for more registers than the launch holds");
  // Made warp-uniform for the compiler, so that descriptor and stage arithmetic stays
  // in uniform registers.
  const int warp_group = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  const int tid = threadIdx.x % 128;
  init_stage_ring(bars, kStages, 8 * kCluster, &map_a, &map_b);  // per consumer warp of the cluster
  __syncthreads();
  // The peer's barriers are initialised before anything is multicast into or arrives on
  // them.
  if constexpr (kCluster > 1) cluster_sync();
  // Launched as a programmatic dependent of the operand preparation.
  wait_prior_grid();

  const int tiles_m = (p.m + kBlockM - 1) / kBlockM;
  const int tiles_n = (p.n + kBlockN - 1) / kBlockN;
  const int units_m = (tiles_m + kCluster - 1) / kCluster;
  const int tiles = units_m * tiles_n;
  const int splits = kSplit ? sp.splits : 1;
  const int units = tiles * splits;
  const int rank = kCluster > 1 ? static_cast<int>(cluster_rank()) : 0;
  const int cluster_id = static_cast<int>(blockIdx.x) / kCluster;
  const int clusters = static_cast<int>(gridDim.x) / kCluster;
  const int kblocks_all = (p.k + kBlockK - 1) / kBlockK;
  // Work unit u: tile (u % tiles) over K slice (u / tiles), so that the units running at
  // once share A and B blocks of one K range. A slice is the K blocks [kb0, kb1).
  struct Unit {
    int tile, slice, kb0, kb1;
  };
  auto unit_at = [&](int u) {
    if constexpr (kSplit) {
      const int s = u / tiles;
      return Unit{u - s * tiles, s, static_cast<int>(int64_t(s) * kblocks_all / splits),
                  static_cast<int>(int64_t(s + 1) * kblocks_all / splits)};
    } else {
      return Unit{u, 0, 0, kblocks_all};
    }
  };

  if (warp_group == 0) {
    // Producer: one thread issues the TMA loads of A and B for every K block of the
    // CTA's tiles, as stages free up.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kProducerRegs));
    if (tid != 0) return;
    int stage = 0;
    uint32_t phase = 0;
    for (int u = cluster_id; u < units; u += clusters) {
      const Unit w = unit_at(u);
      const TileCoord c = tile_coord<kCluster>(w.tile, units_m, tiles_n, rank);
      for (int kb = w.kb0; kb < w.kb1; ++kb) {
        mbar_wait(empty_bar(stage), phase ^ 1);
        mbar_arrive_expect_tx(full_bar(stage), kStageBytes);
        if constexpr (kAmnRead) {
          tma_load_2d(tile_a(stage), &map_a, full_bar(stage), c.m0, kb * kBlockK);
        } else {
#pragma unroll
          for (int h = 0; h < L::kSubTiles; ++h) {
            tma_load_2d(tile_a(stage) + h * L::kSubABytes, &map_a, full_bar(stage),
                        kb * kBlockK + h * L::kSubK, c.m0);
          }
        }
        if constexpr (kBmnCopy) {
          tma_load_2d(tile_b(stage), &map_b, full_bar(stage), c.n0, kb * kBlockK);
        } else if constexpr (kCluster == 1) {
#pragma unroll
          for (int h = 0; h < L::kSubTiles; ++h) {
            tma_load_2d(tile_b(stage) + h * L::kSubBBytes, &map_b, full_bar(stage),
                        kb * kBlockK + h * L::kSubK, c.n0);
          }
        } else {
          constexpr uint32_t kSlice = L::kTileBBytes / kCluster;
          tma_load_2d_multicast(tile_b(stage) + rank * kSlice, &map_b, full_bar(stage),
                                kb * kBlockK, c.n0 + rank * (kBlockN / kCluster),
                                static_cast<uint16_t>((1u << kCluster) - 1));
        }
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    if constexpr (kCluster > 1) {
      // The peer's consumers arrive on this CTA's empty barriers: the CTA (and its shared
      // memory) stays until every stage has been released by both CTAs.
      for (int i = 0; i < kStages; ++i) {
        mbar_wait(empty_bar(stage), phase ^ 1);
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kConsumerRegs));
  const int consumer = warp_group - 1;  // 64-row half of the tile
  const int warp = tid / 32, lane = tid % 32;
  // The thread's two accumulator rows: fragment rows g and g + 8 of the warp's 16, which
  // are M rows 2g and 2g + 1 when A's fragments are built from MN-major storage.
  const int row_in_tile = consumer * 64 + warp * 16 + (kAmnRead ? 2 * (lane / 4) : lane / 4);
  constexpr int kHiRow = kAmnRead ? 1 : 8;
  // This lane's row address for ldmatrix: MN-major A, K row `lane` of a k32 step at the
  // warp's 16-byte chunk of M, swizzled; K-major A (variants 22, 23), see
  // load_a_fragment_f16_k.
  const uint32_t a_lane =
      kAmnRead ? lane * kBlockM + (((consumer * 4 + warp) ^ (lane & 7)) << 4)
               : (consumer * 64 + warp * 16 + lane % 8 + 8 * ((lane / 8) % 2)) * 128 +
                     (((lane / 16) ^ (lane & 1)) << 4);
  [[maybe_unused]] const uint32_t a_x6 = lane & 6;

  // Shared-memory descriptors of stage 0 (this warp group's 64 rows of A, all of B).
  // A stage is kStageBytes further on, a sub-tile kSub*Bytes, a k32 (FP8) or k16 (BF16)
  // step 32 bytes: all only move the start address field (bits 0-13, in 16-byte units),
  // which never carries into the rest.
  const uint64_t desc_a0 = smem_desc(tile_a(0) + consumer * 64 * 128);
  const uint64_t desc_b0 = smem_desc(tile_b(0));
  constexpr uint32_t kStageDesc = kStageBytes >> 4;

  int unit = cluster_id;  // the grid never exceeds the unit count
  Unit w = unit_at(unit);
  int kblocks = w.kb1 - w.kb0;  // K blocks of the current unit
  TileCoord c = tile_coord<kCluster>(w.tile, units_m, tiles_n, rank);

  int stage = 0;
  uint32_t phase = 0;
  // Waits for the next stage's operands and issues its MMAs into `t`.
  uint32_t f[16];  // A fragment of the block being issued (kAmn only)
  auto issue_next = [&](float (&t)[64]) {
    mbar_wait(full_bar(stage), phase);
    const uint32_t off = stage * kStageDesc;
    if constexpr (kAmn) {
      load_a_fragment(f, tile_a(stage) + a_lane);
      issue_block_rs(t, f, desc_b0 + off);
    } else {
      issue_block<kBf16>(t, desc_a0 + off, desc_b0 + off, L::kSubABytes >> 4, L::kSubBBytes >> 4);
    }
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  };
  // Stages are handed back to the producer in the order they were issued, one arrival
  // per warp once all its lanes are past the stage's MMAs.
  int release_stage = 0;
  auto release = [&]() {
    __syncwarp();
    if (lane == 0) {
      if constexpr (kCluster == 1) {
        mbar_arrive(empty_bar(release_stage));
      } else {
        mbar_arrive(empty_bar(release_stage));
#pragma unroll
        for (int q = 1; q < kCluster; ++q) {
          mbar_arrive_cluster(empty_bar(release_stage), (rank + q) % kCluster);
        }
      }
    }
    if (++release_stage == kStages) release_stage = 0;
  };

  // Block scales of the thread's two rows and of the tile's columns, read from global
  // memory two blocks ahead of their promotion: set s holds those of the block in
  // temporary t<s>. The pointers walk along K through the current tile.
  float sa_lo[2], sa_hi[2], sb[2];
  const float* pa_lo;
  const float* pa_hi;
  const float* pbs;
  auto point_scales = [&](const TileCoord& tc, int kb0) {
    // Rows past M compute on TMA's zero fill; their scales are read from the last row.
    const int r = tc.m0 + row_in_tile;
    pa_lo = p.sfa + static_cast<int64_t>(min(r, p.m - 1)) * p.sfa_stride_m + kb0 * p.sfa_stride_k;
    pa_hi = p.sfa + static_cast<int64_t>(min(r + kHiRow, p.m - 1)) * p.sfa_stride_m +
            kb0 * p.sfa_stride_k;
    pbs = p.sfb + static_cast<int64_t>(tc.n0 / 128) * p.sfb_stride_n + kb0 * p.sfb_stride_k;
  };
  auto load_scales = [&](int set) {
    sa_lo[set] = __ldg(pa_lo);
    sa_hi[set] = __ldg(pa_hi);
    sb[set] = __ldg(pbs);
    pa_lo += p.sfa_stride_k;
    pa_hi += p.sfa_stride_k;
    pbs += p.sfb_stride_k;
  };

  float acc[64], t0[64], t1[64];

  // Epilogue: the warp group's 64x128 half tile as bf16 into two 64x64 boxes of shared
  // memory in the 128-byte swizzle (stmatrix: four 8x8 matrices per instruction, in the
  // accumulator's own fragment layout; the 8 rows of a matrix hit 8 different 16-byte
  // chunks, no bank conflicts), then one thread hands both boxes to TMA, which clips
  // rows and columns past the ends. The staging buffer is reused once the previous
  // tile's stores have read it, long done by then.
  const uint32_t out_half = out_base + consumer * 2 * kOutBoxBytes;
  const int st_matrix = lane / 8;  // which of the four 8x8 matrices this lane addresses
  const int st_row = kAmnRead ? warp * 16 + 2 * (lane % 8) + (st_matrix & 1)
                          : warp * 16 + (st_matrix & 1) * 8 + lane % 8;
  // Thread 0 of the warp group waits for and issues the TMA stores through predicated
  // instructions rather than a branch: the next tile's MMAs are in flight meanwhile, and
  // divergent code would make the compiler serialize them.
  const uint32_t is_leader = tid == 0;
  auto store_tile = [&](const TileCoord& tc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.u32 p, %0, 0;\n@p cp.async.bulk.wait_group.read 0;\n}" ::"r"(
            is_leader)
        : "memory");
    named_barrier(1 + consumer, 128);
#pragma unroll
    for (int j = 0; j < 16; j += 2) {  // column groups j and j + 1 (8 columns each)
      uint32_t r[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const __nv_bfloat162 v = __floats2bfloat162_rn(acc[4 * j + 2 * q], acc[4 * j + 2 * q + 1]);
        r[q] = *reinterpret_cast<const uint32_t*>(&v);
      }
      const int chunk = (j % 8 + (st_matrix >> 1)) ^ (st_row % 8);
      const uint32_t addr = out_half + (j / 8) * kOutBoxBytes + st_row * 128 + chunk * 16;
      asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr),
                   "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                   : "memory");
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    named_barrier(1 + consumer, 128);
    const int row = tc.m0 + consumer * 64;
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.u32 p, %0, 0;\n"
        "@p cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%1, {%3, %5}], [%2];\n"
        "@p cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%1, {%4, %5}], [%6];\n"
        "@p cp.async.bulk.commit_group;\n}" ::"r"(is_leader),
        "l"(reinterpret_cast<uint64_t>(&map_d)), "r"(out_half), "r"(tc.n0), "r"(tc.n0 + 64), "r"(row),
        "r"(out_half + kOutBoxBytes)
        : "memory");
  };

  // One step of the K loop: issue block kb into `cur` (its scales in set S), then
  // promote block kb-1 from `prev` and load block kb+1's scales into the freed set.
  // Issues the next block into `cur` with the previous one's MMAs (in `prev`) still in
  // flight, and returns once those are done. With A fragments in registers there is
  // room for one block's only (ptxas serializes every wgmma otherwise, C7512): the
  // previous block is waited for first, and the other warp group's MMAs keep the
  // tensor cores busy across the gap.
  auto advance = [&](float (&cur)[64], float (&prev)[64]) {
    if constexpr (kAmn) {
      cute::warpgroup_wait<0>();
      fence_regs(prev);
      fence_regs(f);
      issue_next(cur);
    } else {
      issue_next(cur);
      cute::warpgroup_wait<1>();
      fence_regs(prev);
    }
  };

  auto step = [&](auto set, float (&cur)[64], float (&prev)[64], int kb) {
    constexpr int S = decltype(set)::value;
    advance(cur, prev);
    promote(acc, prev, sa_lo[S ^ 1] * sb[S ^ 1], sa_hi[S ^ 1] * sb[S ^ 1]);
    release();
    if (kb + 1 < kblocks) load_scales(S ^ 1);
  };

  // Split-K epilogue of a unit (its accumulator complete for its slice). Every slice
  // writes its partial half tile to the workspace in the accumulator's own fragment
  // order (thread by thread: 16-byte stores, and the reader is the same thread of
  // another CTA), then counts itself in on the half tile's counter. The last to arrive
  // adds the slices in slice order, whichever CTA that is, so the result does not
  // depend on timing, and stores the tile.
  auto split_store = [&](const TileCoord& tc) {
    if (splits == 1) {
      store_tile(tc);
      return;
    }
    constexpr int kWarpFloats = 16 * 32 * 4;  // a warp's 16 x 128 partial
    auto partial = [&](int slice) {
      const int64_t half = (int64_t(w.tile) * splits + slice) * 2 + consumer;
      return sp.partials + (half * 4 + warp) * kWarpFloats + lane * 4;
    };
    float* mine = partial(w.slice);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      __stcg(reinterpret_cast<float4*>(mine + j * 128),
             make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]));
    }
    // The barrier orders every thread's stores before thread 0's release (the count);
    // the count's acquire, then the barrier, order the other slices' partials before
    // this warp group's reads of them (the pattern of CUTLASS's semaphores: one release
    // per warp group rather than a fence per thread, which measured the same).
    named_barrier(1 + consumer, 128);
    if (tid == 0) {
      uint32_t arrived;
      asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;"
                   : "=r"(arrived)
                   : "l"(sp.counters + 2 * w.tile + consumer)
                   : "memory");
      split_last[consumer] = arrived == static_cast<uint32_t>(splits - 1);
    }
    named_barrier(1 + consumer, 128);
    if (!split_last[consumer]) return;
    // In two halves of 32 floats, so that the sum, the loads and the accumulator fit in
    // registers at once (t0 and t1 are free: the unit's MMAs are all done; loading
    // several slices at once into new arrays spilled, as t0 and t1 stay allocated).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      for (int s = 0; s < splits; ++s) {
        if (s == w.slice) {
#pragma unroll
          for (int i = 0; i < 32; ++i) t0[i] = acc[32 * h + i];
        } else {
          const float* src = partial(s) + h * 8 * 128;
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const float4 v = __ldcg(reinterpret_cast<const float4*>(src + j * 128));
            t0[4 * j] = v.x;
            t0[4 * j + 1] = v.y;
            t0[4 * j + 2] = v.z;
            t0[4 * j + 3] = v.w;
          }
        }
        if (s == 0) {
#pragma unroll
          for (int i = 0; i < 32; ++i) t1[i] = t0[i];
        } else {
#pragma unroll
          for (int i = 0; i < 32; ++i) t1[i] += t0[i];
        }
      }
#pragma unroll
      for (int i = 0; i < 32; ++i) acc[32 * h + i] = t1[i];
    }
    store_tile(tc);
  };

  // After a tile's last MMAs are issued, the next tile's first block goes in before the
  // last promotion and the epilogue, so that the tensor cores have work while the
  // consumers store the tile. Returns whether there is a next tile (now `c`). Split-K
  // units end with their MMAs drained instead: the next unit's block count, and so the
  // temporary it starts in, may differ.
  auto finish_tile = [&](auto set, float (&last)[64], float (&other)[64]) {
    constexpr int S = decltype(set)::value;
    if constexpr (!kSplit) {
      const int next = unit + clusters;
      if (next < units) {
        const TileCoord nc = tile_coord<kCluster>(next, units_m, tiles_n, rank);
        point_scales(nc, 0);
        load_scales(S ^ 1);
        advance(other, last);
        promote(acc, last, sa_lo[S] * sb[S], sa_hi[S] * sb[S]);
        release();
        if (kblocks > 1) load_scales(S);
        store_tile(c);
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
        unit = next;
        c = nc;
        return true;
      }
    }
    cute::warpgroup_wait<0>();
    fence_regs(last);
    promote(acc, last, sa_lo[S] * sb[S], sa_hi[S] * sb[S]);
    release();
    if constexpr (kSplit) {
      split_store(c);
    } else {
      store_tile(c);
    }
    return false;
  };
  // A tile whose block 0 is in flight in `first` (scales in set S) and, if it has more
  // than one block, block 1's scales in the other set. Runs the rest of its K loop and
  // finishes it; returns whether there is a next tile. The next tile starts in `first`
  // if the block count is even, else in `second`.
  auto run_tile = [&](auto set, float (&first)[64], float (&second)[64]) {
    constexpr int S = decltype(set)::value;
    using Same = std::integral_constant<int, S>;
    using Other = std::integral_constant<int, S ^ 1>;
    int kb = 1;
    for (; kb + 1 < kblocks; kb += 2) {
      step(Other{}, second, first, kb);
      step(Same{}, first, second, kb + 1);
    }
    if (kb < kblocks) {
      step(Other{}, second, first, kb);
      return finish_tile(Other{}, second, first);
    }
    return finish_tile(Same{}, first, second);
  };
  // Zeroes the accumulator, points the scales at the unit's first K block and issues
  // that block into t0.
  auto start_unit = [&]() {
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    point_scales(c, w.kb0);
    load_scales(0);
    if (kblocks > 1) load_scales(1);
    issue_next(t0);
  };

  using Zero = std::integral_constant<int, 0>;
  using One = std::integral_constant<int, 1>;
  if constexpr (kCvt != Cvt::kNone) {
    // Variant 20 (exact mode, both operands MN-major FP8): per block, all 256 consumer
    // threads convert B's FP8 block into one of two FP16 copies (rows of K, two 64-column
    // halves, the layout MN-major 16-bit wgmma reads) while the previous block's MMAs
    // run; then each warp group waits for those, builds its FP16 A fragments in
    // registers (one set: the MMAs read them until they are done), and issues the block's
    // 8 k16 MMAs once the other warp group's part of the copy is written, and promotes
    // the previous block while they run (two temporaries, as variant 10).
    // The warp groups hand each other their parts through named barriers, one per warp
    // group and copy: a warp group arrives on its own after it has written its part and
    // its previous MMAs are done, and waits on the other's only right before issuing, so
    // that each issues as soon as its own fragments are built (the two run a block
    // apart, and the tensor cores get one's MMAs while the other builds fragments). A
    // copy is rewritten two blocks after it was read: by then both warp groups have
    // arrived after waiting for those MMAs, and each has waited on the other's arrival.
    const int ct = consumer * 128 + tid;  // 0..255: the thread's share of B's conversion
    uint32_t f[32];
    int cbuf = 0;
    // Converts four 16-byte chunks of B's FP8 block (128 rows of 128 bytes, 128-byte
    // swizzle) into the FP16 copy at `dst`: chunk c of row r holds 16 elements, which go
    // to half c / 4, 16-byte chunks 2 (c % 4) and 2 (c % 4) + 1, swizzled. MN-major B:
    // rows of K, the chunk N 16c..16c+15, copied in order; with A K-major (variants 22,
    // 23) each row of K goes to the row of the copy that load_a_fragment_f16_k's K order
    // gives it (K 4t + j to row 2t + j, K 4t + 2 + j to row 8 + 2t + j, j < 2, within
    // each 16). K-major B: rows of N, the chunk K 16c..16c+15, copied in order after A
    // MN-major (20, 21), in that K order after A K-major (22, 23): the first 16 bytes
    // hold K {0, 1, 4, 5, 8, 9, 12, 13} (each word's low pair), the second K {2, 3, 6, 7,
    // 10, 11, 14, 15} (the high pairs). The thread takes chunk
    // c = ct % 8 of rows ct / 8 + 32 i: the swizzle (row % 8) and the K order (row % 16)
    // are the same for all four, so their addresses are fixed offsets from one another.
    const int crow = ct >> 3, cchunk = ct & 7;
    const uint32_t b_src = crow * 128 + ((cchunk ^ (crow & 7)) << 4);
    const int r16 = crow & 15;
    const int drow = kBmnCopy && kPermK
                         ? (crow & ~15) | ((r16 & 2) << 2) | ((r16 >> 2) << 1) | (r16 & 1)
                         : crow;
    const uint32_t b_dst = (cchunk >> 2) * L::kCopyHalfBytes + drow * 128;
    const uint32_t b_dst0 = b_dst + (((2 * (cchunk & 3)) ^ (drow & 7)) << 4);
    const uint32_t b_dst1 = b_dst + (((2 * (cchunk & 3) + 1) ^ (drow & 7)) << 4);
    auto convert_b = [&](uint32_t src, uint32_t dst) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint32_t x[4];
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3])
                     : "r"(src + b_src + i * 32 * 128)
                     : "memory");
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          uint32_t y[4];
          if constexpr (kBmnCopy || !kPermK) {
            y[0] = e4m3x2_to_half2(x[2 * h], 0);
            y[1] = e4m3x2_to_half2(x[2 * h], 1);
            y[2] = e4m3x2_to_half2(x[2 * h + 1], 0);
            y[3] = e4m3x2_to_half2(x[2 * h + 1], 1);
          } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) y[j] = e4m3x2_to_half2(x[j], h);
          }
          asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(
                           dst + (h ? b_dst1 : b_dst0) + i * 32 * 128),
                       "r"(y[0]), "r"(y[1]), "r"(y[2]), "r"(y[3])
                       : "memory");
        }
      }
    };
    // Block kb into `cur`, its scales into set P: convert B (the previous block's MMAs,
    // into `prev`, still running), wait for those and hand their stage back (`first`:
    // none, the unit's first block), take A's fragments, and issue the MMAs once both
    // warp groups' parts of the copy are written.
    // Returns with them in flight. The scales are loaded after the proxy fence that
    // makes the copy visible to the MMAs (MEMBAR.ALL.CTA in the SASS, which waits for the
    // thread's memory operations in flight), a block before their promotion.
    auto issue_cvt = [&](auto set, float(&cur)[64], float(&prev)[64], auto first) {
      constexpr int P = decltype(set)::value;
      mbar_wait(full_bar(stage), phase);
      const uint32_t copy = copies + cbuf * L::kCopyBytes;
      convert_b(tile_b(stage), copy);
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      load_scales(P);
      cute::warpgroup_wait<0>();
      fence_regs(prev);
      fence_regs(f);
      // The previous block's stage goes back now that its MMAs are done: they read the A
      // fragments that its ldmatrix loads produced, so those loads have returned (B's
      // block went into the copy before). Releasing it right after those loads, as this
      // did before, let TMA refill the stage while they were still reading it: ptxas
      // does not wait for an ldmatrix's results before a later mbarrier arrival (8-17 of
      // 240 launches of variant 22 at 4096x4096x7168 differed, in whole rows). Making
      // the arrival wait for them instead measured up to 10% slower on the guide's
      // layout (NOTES.md, v24).
      if constexpr (!decltype(first)::value) release();
      named_barrier_arrive(3 + 2 * cbuf + consumer, 256);
      if constexpr (kAmnRead) {
        load_a_fragment_f16(f, tile_a(stage) + a_lane);
      } else {
        load_a_fragment_f16_k(f, tile_a(stage) + a_lane, a_x6);
      }
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1;
      }
      named_barrier(3 + 2 * cbuf + (consumer ^ 1), 256);
      fence_regs(cur);
      cute::warpgroup_arrive();
#pragma unroll
      for (int kk = 0; kk < kBlockK / 16; ++kk) {
        if constexpr (kBmnCopy) {  // 16 rows of K further on per k16 step
          mma_rs<MmaF16Mn>(f[4 * kk], f[4 * kk + 1], f[4 * kk + 2], f[4 * kk + 3],
                           smem_desc_mn(copy + kk * 16 * 128, L::kCopyHalfBytes), cur, kk > 0);
        } else {  // 32 bytes along the rows per k16 step, the second half after four
          mma_rs<MmaF16K>(f[4 * kk], f[4 * kk + 1], f[4 * kk + 2], f[4 * kk + 3],
                          smem_desc(copy + (kk / 4) * L::kCopyHalfBytes) + 2 * (kk % 4), cur,
                          kk > 0);
        }
      }
      cute::warpgroup_commit_batch();
      cbuf ^= 1;
    };
    // Block kb into `cur` (its scales into set S ^ 1) after block kb-1 in `prev`, whose
    // scales are in set S.
    auto block = [&](auto set, float(&cur)[64], float(&prev)[64]) {
      constexpr int S = decltype(set)::value;
      issue_cvt(std::integral_constant<int, S ^ 1>{}, cur, prev, std::false_type{});
      promote(acc, prev, sa_lo[S] * sb[S], sa_hi[S] * sb[S]);
    };
    // Variant 21: units are (tile, K slice), each ending in split_store.
    for (; unit < units; unit += clusters) {
      w = unit_at(unit);
      kblocks = w.kb1 - w.kb0;
      c = tile_coord<1>(w.tile, units_m, tiles_n, 0);
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
      point_scales(c, w.kb0);
      issue_cvt(Zero{}, t0, t1, std::true_type{});
      int kb = 1;
      for (; kb + 1 < kblocks; kb += 2) {
        block(Zero{}, t1, t0);
        block(One{}, t0, t1);
      }
      if (kb < kblocks) block(Zero{}, t1, t0);
      cute::warpgroup_wait<0>();
      fence_regs(t0);
      fence_regs(t1);
      release();  // the unit's last stage
      if ((kblocks - 1) & 1) {
        promote(acc, t1, sa_lo[1] * sb[1], sa_hi[1] * sb[1]);
      } else {
        promote(acc, t0, sa_lo[0] * sb[0], sa_hi[0] * sb[0]);
      }
      if constexpr (kSplit) {
        split_store(c);
      } else {
        store_tile(c);
      }
    }
  } else if constexpr (kSplit) {
    while (true) {
      start_unit();
      run_tile(Zero{}, t0, t1);
      unit += clusters;
      if (unit >= units) break;
      w = unit_at(unit);
      kblocks = w.kb1 - w.kb0;
      c = tile_coord<kCluster>(w.tile, units_m, tiles_n, rank);
    }
  } else {
    start_unit();
    // Which temporary a tile starts in is fixed by the parity of the block count, so
    // that no branch merges paths with different registers in flight (the compiler
    // would wait for the MMAs there).
    if (kblocks % 2 == 0) {
      while (run_tile(Zero{}, t0, t1)) {
      }
    } else {
      while (run_tile(Zero{}, t0, t1) && run_tile(One{}, t1, t0)) {
      }
    }
  }
  // Shared memory must outlive the last store's reads.
  if (tid == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// ---- host side ------------------------------------------------------------------------

// Most K slices of the split-K builds.
constexpr int kMaxSplits = 64;

// The split-K workspace: the arrival counters (zeroed by the caller before the launch),
// then the partial tiles. Empty without a split.
struct SplitLayout {
  int splits;
  size_t counter_bytes;  // a multiple of 256
  size_t bytes;          // counters and partials
};

SplitLayout split_layout(const GemmArgs& g) {
  const int64_t tiles = int64_t((g.m + kBlockM - 1) / kBlockM) * ((g.n + kBlockN - 1) / kBlockN);
  const int kblocks = (g.k + kBlockK - 1) / kBlockK;
  int s = g.splits;
  if (s <= 0) {
    // Default: as many slices as keep every tile's slices in one wave of CTAs.
    const int64_t fit = tiles > 0 ? g.sm_count / tiles : 1;
    s = static_cast<int>(fit < 1 ? 1 : fit > kMaxSplits ? kMaxSplits : fit);
    s = s < kblocks ? s : kblocks;
  }
  if (s <= 1 || tiles * s > 0x7FFFFFFF) return {1, 0, 0};
  const size_t counters = (static_cast<size_t>(tiles) * 2 * sizeof(uint32_t) + 255) / 256 * 256;
  const size_t partials = static_cast<size_t>(tiles) * s * kBlockM * kBlockN * sizeof(float);
  return {s, counters, counters + partials};
}

template <int kCluster, bool kAmn, bool kSplit, bool kBf16 = false, Cvt kCvt = Cvt::kNone>
Status launch(const GemmArgs& g, void* ws, cudaStream_t stream, const char** why) {
  using L = Smem<kBf16, kCvt>;
  constexpr auto kKernel = gemm_kernel<kCluster, kAmn, kSplit, kBf16, kCvt>;
  if (!sm90::tma_operands_ok(g, why)) return Status::kUnsupported;
  SplitParams sp{1, nullptr, nullptr};
  if constexpr (kSplit) {
    const int kblocks = (g.k + kBlockK - 1) / kBlockK;
    if (g.splits > kMaxSplits || g.splits > kblocks) {
      if (why) *why = "split-K takes at most 64 slices and at most one per 128-deep K block";
      return Status::kUnsupported;
    }
    const SplitLayout l = split_layout(g);
    if (l.bytes > 0 && !ws) {
      if (why) *why = "split-K needs its workspace";
      return Status::kUnsupported;
    }
    sp.splits = l.splits;
    if (l.bytes > 0) {
      sp.counters = static_cast<uint32_t*>(ws);
      sp.partials = reinterpret_cast<float*>(static_cast<uint8_t*>(ws) + l.counter_bytes);
    }
  } else {
    (void)ws;
  }
  using R = Reads<kAmn, kCvt>;
  const bool real_extents_ok = g.n_b >= 1 && g.n_b <= g.n && g.k_a >= 1 && g.k_a <= g.k;
  if (g.a_mn_major != R::kAmnRead || g.b_mn_major != R::kBmnCopy || g.b_kperm16 != kAmn ||
      (R::kConvert && !real_extents_ok)) {
    if (why) {
      *why = kAmn ? "this kernel reads A MN-major and B in its K order (a_mn_major, b_kperm16)"
             : R::kAmnRead
                 ? (R::kBmnCopy ? "this kernel reads A and B MN-major in place (a_mn_major, b_mn_major, n_b, k_a)"
                                : "this kernel reads A MN-major and B K-major in place (a_mn_major, n_b, k_a)")
             : R::kBmnCopy ? "this kernel reads A K-major and B MN-major in place (b_mn_major, n_b, k_a)"
             : R::kConvert ? "this kernel reads A and B K-major in place (n_b, k_a)"
                           : "this kernel reads A and B K-major in plain K order";
    }
    return Status::kUnsupported;
  }
  CUtensorMap map_a, map_b, map_d;
  const auto type = kBf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8;
  constexpr int eb = L::kElemBytes;
  // MN-major A: its k_a real rows of K (TMA reads zeros past them up to the padded k).
  // MN-major B (variants 20-23): its k_a rows of K and n_b real columns. K-major A and B
  // read in place (variants 20-23): their k_a real columns, n_b real rows of B.
  const bool a_ok =
      R::kAmnRead ? make_map(&map_a, type, eb, g.a, g.k_a, g.m, g.lda, kBlockK, kBlockM)
                  : make_map(&map_a, type, eb, g.a, g.m, R::kConvert ? g.k_a : g.k, g.lda, kBlockM,
                             L::kSubK);
  const bool b_ok =
      R::kBmnCopy  ? make_map(&map_b, type, eb, g.b, g.k_a, g.n_b, g.ldb, kBlockK, kBlockN)
      : R::kConvert ? make_map(&map_b, type, eb, g.b, g.n_b, g.k_a, g.ldb, kBlockN, L::kSubK)
                    : make_map(&map_b, type, eb, g.b, g.n, g.k, g.ldb, kBlockN / kCluster, L::kSubK);
  if (!a_ok || !b_ok ||
      !make_map(&map_d, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, g.d, g.m, g.n, g.ldd, 64, 64)) {
    if (why) *why = "cuTensorMapEncodeTiled failed for an operand or the output";
    return Status::kLaunchFailed;
  }
  static uint64_t smem_reserved = 0;
  if (!reserve_smem_once(kKernel, g.device, L::kBytes, &smem_reserved)) {
    if (why) *why = "cannot reserve the kernel's shared memory";
    return Status::kLaunchFailed;
  }
  // The scales are read through their strides, two K blocks ahead of their use; with
  // contiguous K blocks (row-major (M, KB) and (NB, KB)) a 32-byte sector serves 8 blocks
  // from L1. Other layouts work but miss L1 on every block (the op copies them to
  // row-major first; NOTES.md, v10).
  const ProblemParams p = problem_params(g);
  const int tiles_m = (g.m + kBlockM - 1) / kBlockM;
  const int units =
      (tiles_m + kCluster - 1) / kCluster * ((g.n + kBlockN - 1) / kBlockN) * sp.splits;
  cudaLaunchConfig_t cfg{};
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = L::kBytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  int nattr = 0;
  int resident = g.sm_count / kCluster;  // clusters that run at once
  if constexpr (kCluster > 1) {
    attr[nattr].id = cudaLaunchAttributeClusterDimension;
    attr[nattr].val.clusterDim.x = kCluster;
    attr[nattr].val.clusterDim.y = 1;
    attr[nattr].val.clusterDim.z = 1;
    ++nattr;
    // A persistent grid must not exceed the clusters the GPU places at once (GPCs may
    // leave SMs over); asked once per device.
    static int max_clusters[64] = {};
    int* slot = g.device >= 0 && g.device < 64 ? &max_clusters[g.device] : nullptr;
    int n = slot ? __atomic_load_n(slot, __ATOMIC_ACQUIRE) : 0;
    if (n == 0) {
      cfg.gridDim = dim3(kCluster * resident);
      cfg.attrs = attr;
      cfg.numAttrs = nattr;
      if (cudaOccupancyMaxActiveClusters(&n, kKernel, &cfg) != cudaSuccess || n < 1) {
        if (why) *why = "cannot place the kernel's thread-block clusters on this GPU";
        return Status::kLaunchFailed;
      }
      if (slot) __atomic_store_n(slot, n, __ATOMIC_RELEASE);
    }
    resident = n < resident ? n : resident;
  }
  if (g.pdl) {
    attr[nattr].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[nattr].val.programmaticStreamSerializationAllowed = 1;
    ++nattr;
  }
  cfg.gridDim = dim3(static_cast<unsigned>(kCluster * (units < resident ? units : resident)));
  cfg.attrs = attr;
  cfg.numAttrs = nattr;
  if (cudaLaunchKernelEx(&cfg, kKernel, map_a, map_b, map_d, p, sp) !=
      cudaSuccess) {
    if (why) *why = cudaGetErrorString(cudaGetLastError());
    return Status::kLaunchFailed;
  }
  return Status::kOk;
}

// Variants 20-23: exact mode on FP8 operands read in place. A's storage (kAmnStored)
// picks the variant; B's, known only at run time, picks the build.
template <bool kAmnStored, bool kSplit>
Status launch_exact(const GemmArgs& g, void* ws, cudaStream_t stream, const char** why) {
  constexpr Cvt kBmn = kAmnStored ? Cvt::kMn : Cvt::kKMn;
  constexpr Cvt kBk = kAmnStored ? Cvt::kMnK : Cvt::kK;
  return g.b_mn_major ? launch<1, false, kSplit, false, kBmn>(g, ws, stream, why)
                      : launch<1, false, kSplit, false, kBk>(g, ws, stream, why);
}

}  // namespace
}  // namespace kfgemm::overlap

namespace kfgemm::variants {

size_t fp8_coop_128x128_overlap_workspace(const GemmArgs&) { return 0; }

Status fp8_coop_128x128_overlap_run(const GemmArgs& g, void* ws, cudaStream_t stream,
                                     const char** why) {
  return overlap::launch<1, false, false>(g, ws, stream, why);
}

size_t fp8_coop_128x128_overlap_cluster2_workspace(const GemmArgs&) { return 0; }

Status fp8_coop_128x128_overlap_cluster2_run(const GemmArgs& g, void* ws, cudaStream_t stream,
                                              const char** why) {
  return overlap::launch<2, false, false>(g, ws, stream, why);
}

size_t fp8_coop_128x128_overlap_amn_workspace(const GemmArgs&) { return 0; }

Status fp8_coop_128x128_overlap_amn_run(const GemmArgs& g, void* ws, cudaStream_t stream,
                                         const char** why) {
  return overlap::launch<1, true, false>(g, ws, stream, why);
}

size_t fp8_coop_128x128_overlap_amn_cluster2_workspace(const GemmArgs&) { return 0; }

Status fp8_coop_128x128_overlap_amn_cluster2_run(const GemmArgs& g, void* ws, cudaStream_t stream,
                                                  const char** why) {
  return overlap::launch<2, true, false>(g, ws, stream, why);
}

size_t fp8_coop_128x128_overlap_splitk_workspace(const GemmArgs& g) {
  return overlap::split_layout(g).bytes;
}

Status fp8_coop_128x128_overlap_splitk_run(const GemmArgs& g, void* ws, cudaStream_t stream,
                                            const char** why) {
  return overlap::launch<1, false, true>(g, ws, stream, why);
}

size_t fp8_coop_128x128_overlap_amn_splitk_workspace(const GemmArgs& g) {
  return overlap::split_layout(g).bytes;
}

Status fp8_coop_128x128_overlap_amn_splitk_run(const GemmArgs& g, void* ws, cudaStream_t stream,
                                                const char** why) {
  return overlap::launch<1, true, true>(g, ws, stream, why);
}

size_t bf16_coop_128x128_overlap_workspace(const GemmArgs&) { return 0; }

Status bf16_coop_128x128_overlap_run(const GemmArgs& g, void* ws, cudaStream_t stream,
                                     const char** why) {
  return overlap::launch<1, false, false, true>(g, ws, stream, why);
}

size_t fp8_coop_128x128_exact_amn_workspace(const GemmArgs&) { return 0; }

Status fp8_coop_128x128_exact_amn_run(const GemmArgs& g, void* ws, cudaStream_t stream,
                                     const char** why) {
  return overlap::launch_exact<true, false>(g, ws, stream, why);
}

size_t fp8_coop_128x128_exact_amn_splitk_workspace(const GemmArgs& g) {
  return overlap::split_layout(g).bytes;
}

Status fp8_coop_128x128_exact_amn_splitk_run(const GemmArgs& g, void* ws, cudaStream_t stream,
                                            const char** why) {
  return overlap::launch_exact<true, true>(g, ws, stream, why);
}

size_t fp8_coop_128x128_exact_ak_workspace(const GemmArgs&) { return 0; }

Status fp8_coop_128x128_exact_ak_run(const GemmArgs& g, void* ws, cudaStream_t stream,
                                     const char** why) {
  return overlap::launch_exact<false, false>(g, ws, stream, why);
}

size_t fp8_coop_128x128_exact_ak_splitk_workspace(const GemmArgs& g) {
  return overlap::split_layout(g).bytes;
}

Status fp8_coop_128x128_exact_ak_splitk_run(const GemmArgs& g, void* ws, cudaStream_t stream,
                                            const char** why) {
  return overlap::launch_exact<false, true>(g, ws, stream, why);
}

size_t overlap_splitk_zeroed_bytes(const GemmArgs& g) {
  return overlap::split_layout(g).counter_bytes;
}

}  // namespace kfgemm::variants
