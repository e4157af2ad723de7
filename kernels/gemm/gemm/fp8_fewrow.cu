// FP8 block-scaled GEMM for few-row problems (decode: M up to a few hundred), built to stream B
// like a plain read:
//
//   D[m, n] = sum_k A[m, k] B[n, k] sfa[m, k/128] sfb[n/128, k/128]
//
// With 64 or 128 rows the time is the time to read B (64x2112x7168: 15 MB of B against
// 2 GFLOP), and NOTES.md (v17) measured the op's split-K kernels 3 us slower than a
// streaming read of the same bytes, plus 2 us for the sum of the slices. What a read
// has and those kernels lack: every SM busy from the first microsecond to the last, each
// with as many bytes in flight as it can hold. So:
//  - work units are (output tile, K slice), slices of whole 128-blocks of nearly equal
//    length (uneven allowed), as many slices as fill the SMs with one unit each
//    (64x2112x7168: 17 tiles x 7 slices = 119 units), or one slice and every SM
//    persistent over several tiles;
//  - one CTA per SM with a ring of 8 (64-row tiles; 7 in exact mode) or 6 (128-row)
//    stages of A and B: about 170-190 KB in flight per SM; the producer warp runs on into
//    the next unit's blocks while the consumers finish a unit;
//  - block scales (any layout) read by the consumers from global memory one block ahead
//    of their use (copying them into each stage by cp.async from the producer warp was
//    up to 8% faster on long K in fast mode, but compute-sanitizer's racecheck reports
//    the slots' reuse across the ring; NOTES.md, v18);
//  - consumers: two warp groups per 64 rows, one per 64-column half of the tile (wgmma
//    m64n64k32); with 64-row tiles each alternates between two temporaries so that a
//    block's scale promotion runs while the next block's MMAs do (with 128-row tiles the
//    544 threads' registers hold one temporary);
//  - exact mode (variant 19), 64-row tiles: each consumer warp group loads its 64 rows
//    of B from the FP8 stage straight into FP16 wgmma fragments (the register operand),
//    and all consumers convert the block of A into an FP16 copy in shared memory (the
//    other operand): FP16 tensor cores (exact products, FP32 accumulation, as the BF16
//    kernels), no conversion pass, and B read once as FP8. Block k's MMAs run while
//    block k+1 is converted;
//  - epilogue: one slice writes the bf16 tile directly; with several, FP32 partial planes
//    summed in slice order by reduce_splits (a programmatic dependent: its CTAs are
//    resident and waiting before this grid ends);
//  - with one row of tiles B is read once: its loads carry an L2 evict-first policy, so
//    that B's lines replace each other rather than lines other kernels left in the L2
//    (after the benchmark's flush those are dirty and each costs a write-back).
//
// Status (NOTES.md, v18, v27): in fast mode (variant 18) it was as fast as CUTLASS's
// kernels at best; with B evict-first it is faster where B is larger than the L2, and the
// op takes it there for up to 64 rows (64x7168x16384: 41.8 against 45.2 us on the H200,
// 55.2 against 58.2 on the H100). With the loads alone it runs within
// 0.8-1.6 us of a streaming read; the MMAs, promotion and epilogue add 1.6-2.8 us
// whatever the consumers' speed (halving their work changed nothing), and the slices'
// sum ends 2.4 us after it. In exact mode (variant 19) the op runs it up to 256 rows;
// B in registers made it 1.04-1.38x faster on the 12 few-row DeepSeek-V3 shapes than
// converting both operands into FP16 copies in shared memory (v18's build, itself
// 1.3-2.7x faster than the BF16 kernels; NOTES.md, v19).
//
// Operands as in GemmArgs: A (m, k) and B (n, k) K-major with 16-byte aligned row
// pitches, k padded to a multiple of 16 with zeros, n a multiple of 8. TMA fills rows and
// columns past the ends with zeros.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "cute/arch/mma_sm90_gmma.hpp"
#include "gemm_api.h"
#include "sm90_ptx.cuh"

namespace kfgemm::fewrow {
namespace {

using namespace kfgemm::sm90;

constexpr int kBlockN = 128;
constexpr int kBlockK = 128;  // bytes of K per stage row = one scale block
constexpr int kMaxSplits = 64;
constexpr size_t kRingBytes = 200 * 1024;

// kGroups: tiles of 64 * kGroups rows, two consumer warp groups per 64 rows. kExact:
// exact mode on FP16 tensor cores (64-row tiles only): B converted in registers, A into
// FP16 copies in shared memory (register_exact_consumers).
template <int kGroups, bool kExact>
struct Config {
  static_assert(!kExact || kGroups == 1, "exact mode takes 64-row tiles");
  static constexpr int kBlockM = 64 * kGroups;
  static constexpr int kConsumerGroups = 2 * kGroups;
  static constexpr int kConsumers = 128 * kConsumerGroups;
  // Two temporaries per thread (block k's MMAs overlapping block k-1's promotion) fit the
  // registers of 288 threads, not of 544 (ptxas gives those 96 each and spills).
  static constexpr bool kOverlap = kGroups == 1 && !kExact;
  // + the producer warp; in exact mode a whole producer warp group, which gives its
  // registers to the consumers (setmaxnreg: the fragments of two blocks, two temporaries
  // and the accumulator need more than the 168 a 384-thread launch holds; below that
  // ptxas serializes the wgmmas).
  static constexpr int kThreads = kConsumers + (kExact ? 128 : 32);
  static constexpr uint32_t kProducerRegs = 40, kConsumerRegs = 232;
  static_assert(!kExact || 128 * kProducerRegs + kConsumers * kConsumerRegs <= kThreads * 168,
                "setmaxnreg asks for more registers than the launch holds");
  static constexpr uint32_t kTileA = kBlockM * kBlockK;
  static constexpr uint32_t kTileB = kBlockN * kBlockK;
  static constexpr uint32_t kStageBytes = kTileA + kTileB;
  // Exact mode: three FP16 copies of A's block (block k+1 is written while block k's
  // MMAs read its copy and block k-1's may still read the third), each row's 128
  // elements in two 128-byte sub-tiles (elements 0-63, then 64-127), the layout 16-bit
  // wgmma reads; with each copy a slot of the block's scales.
  static constexpr uint32_t kSubA = kBlockM * 128;
  static constexpr int kCopies = 3;
  static constexpr uint32_t kStagingBytes = kExact ? kCopies * (2 * kSubA + kBlockM * 4) : 0;
  // Fast mode keeps about 200 KB of stages; exact mode as many as fit beside its copies,
  // up to 8.
  static constexpr int kFastStages = static_cast<int>(kRingBytes / kStageBytes);
  static constexpr int kExactStages =
      static_cast<int>((227 * 1024 - 1024 - kStagingBytes - 16 * 8) / kStageBytes);
  static constexpr int kStages = !kExact ? kFastStages : (kExactStages < 8 ? kExactStages : 8);
  static constexpr size_t kSmemBytes =
      kStages * kStageBytes + kStagingBytes + 2 * kStages * sizeof(uint64_t) + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one SM");
  static_assert(kStageBytes % 1024 == 0 && kTileA % 1024 == 0, "1024-byte aligned tiles");
};

using Mma = cute::SM90::GMMA::MMA_64x64x32_F32E4M3E4M3_SS_TN<>;
// Exact mode multiplies FP16 values: every e4m3fn value is exact in FP16 as in BF16, the
// products are exact either way and accumulate in FP32, and FP8 -> FP16 is one
// instruction per two values (BF16 needs a detour through FP32).
using Mma16Rs = cute::SM90::GMMA::MMA_64x64x16_F32F16F16_RS<cute::SM90::GMMA::Major::K,
                                                           cute::SM90::GMMA::Major::K>;
constexpr int kAcc = 32;  // accumulator floats per thread of a 64x64 quarter tile

struct Params : ProblemParams {
  int splits;
  __nv_bfloat16* d;  // output, row pitch ldd (splits == 1)
  int64_t ldd;
  float* partials;   // splits planes of (m, n) floats (splits > 1)
};

__device__ __forceinline__ void launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// Two FP8 values (half `h` of the word `w`, low byte first) as an FP16 pair.
__device__ __forceinline__ uint32_t fp8x2_to_half2(uint32_t w, int h) {
  const __half2_raw r =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> (16 * h)), __NV_E4M3);
  return static_cast<uint32_t>(r.x) | (static_cast<uint32_t>(r.y) << 16);
}

// Exact mode (variant 19): each warp group multiplies
// its 64 rows of the B tile, as the register operand of FP16 wgmmas, by the tile's 64
// rows of A, as the shared-memory operand: it computes the transposed quarter tile. Per
// block, all consumer threads first convert A's FP8 stage into an FP16 copy (8 KB read,
// 16 KB written, against 48 KB written and read again for copies of both operands), and
// each thread loads its B rows straight from the FP8 stage into fragment registers.
// Block k's MMAs run while block k+1 is loaded and converted and block k-1 promoted: two
// temporaries, two fragment sets, three copies of A (the copy written for block k+1 was
// last read by block k-2's MMAs, which every warp group waited for before block k's
// barrier).
//
// K order: in the k16 step s of a block, thread (g = lane / 4, t = lane % 4) holds the
// fragment columns 2t, 2t+1, 2t+8, 2t+9 of its rows g and g+8. They take the K bytes
// 32t + 4s + {0, 1, 2, 3} of the block, so that a thread reads 32 contiguous bytes of
// each row (two 16-byte loads) and every step uses one of its words. The sum over K does
// not depend on the order as long as A's copy follows it: its logical element 16s + L
// holds K byte 32 (L % 8 / 2) + 4s + 2 (L / 8) + L % 2.
template <typename C, typename UnitAt, typename FullBar, typename EmptyBar>
__device__ __forceinline__ void register_exact_consumers(const Params& p, int units, UnitAt unit_at,
                                                         int warp_group, uint32_t base,
                                                         uint32_t staging, FullBar full_bar,
                                                         EmptyBar empty_bar) {
  constexpr int kStages = C::kStages;
  constexpr int kCopies = C::kCopies;
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(C::kConsumerRegs));
  const int ct = static_cast<int>(threadIdx.x);  // 0 .. kConsumers - 1
  const int lane = ct % 32, warp = (ct % 128) / 32;
  const int g = lane / 4, t = lane % 4;
  // This thread's B rows in the tile (nr, nr + 8), and its A conversion: row am, the words
  // of steps 2aq and 2aq + 1 in each 32-byte quarter of the row.
  const int nr = warp_group * 64 + warp * 16 + g;
  const int am = ct / 4, aq = ct % 4;
  static_assert(C::kConsumers == 4 * C::kBlockM, "four converting threads per row of A");
  const uint32_t copies = staging;                                  // kCopies x 2 kSubA
  const uint32_t scale_slots = staging + kCopies * 2 * C::kSubA;  // kCopies x kBlockM floats
  int stage = 0, copy = 0;
  uint32_t phase = 0;
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const auto w = unit_at(u);
    float acc[kAcc], t0[kAcc], t1[kAcc];
    uint32_t f0[8][4], f1[8][4];
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
    // A scales of row am (its converting threads with aq == 0 store them with the copy)
    // and the tile's B scale, loaded one block ahead. Rows past M read the last row's.
    const float* pa = p.sfa + static_cast<int64_t>(min(w.m0 + am, p.m - 1)) * p.sfa_stride_m +
                      static_cast<int64_t>(w.kb0) * p.sfa_stride_k;
    const float* pb = p.sfb + static_cast<int64_t>(w.n0 / 128) * p.sfb_stride_n +
                      static_cast<int64_t>(w.kb0) * p.sfb_stride_k;
    float na = aq == 0 ? __ldg(pa) : 0.0f, nb = __ldg(pb);
    int left = w.kb1 - w.kb0;  // blocks not yet issued
    // The copies of the block whose MMAs were issued last (cur) and of the one before (prev).
    int cur_copy = 0, prev_copy = 0;
    auto issue = [&](float(&tc)[kAcc], uint32_t(&fr)[8][4]) {
      const float sa = na, sb = nb;
      prev_copy = cur_copy;
      cur_copy = copy;
      if (--left > 0) {
        pa += p.sfa_stride_k;
        pb += p.sfb_stride_k;
        if (aq == 0) na = __ldg(pa);
        nb = __ldg(pb);
      }
      const uint32_t tile_a = base + stage * C::kStageBytes;
      const uint32_t tile_b = tile_a + C::kTileA;
      const uint32_t dst = copies + copy * 2 * C::kSubA;
      mbar_wait(full_bar(stage), phase);
      {
        // A row am: 8 bytes at 32 q + 8 aq of each quarter q (steps 2aq and 2aq + 1) ...
        uint32_t wa[4][2];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const uint32_t src = tile_a + am * 128 + (((2 * q + aq / 2) ^ (am & 7)) << 4) + 8 * (aq % 2);
          asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(wa[q][0]), "=r"(wa[q][1]) : "r"(src));
        }
        // ... as the logical 16-byte chunks 2s and 2s + 1 of those steps: chunk 2s + h holds
        // the pairs 2h, 2h + 1 of step s's word in each quarter.
#pragma unroll
        for (int v = 0; v < 2; ++v) {
          const int s = 2 * aq + v;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const uint32_t addr = dst + (s / 4) * C::kSubA + am * 128 +
                                  (((2 * (s % 4) + h) ^ (am & 7)) << 4);
            asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(addr),
                         "r"(fp8x2_to_half2(wa[0][v], h)), "r"(fp8x2_to_half2(wa[1][v], h)),
                         "r"(fp8x2_to_half2(wa[2][v], h)), "r"(fp8x2_to_half2(wa[3][v], h))
                         : "memory");
          }
        }
        // The block's scale of row am times the tile's B scale.
        if (aq == 0) {
          asm volatile("st.shared.f32 [%0], %1;" ::"r"(scale_slots + (copy * C::kBlockM + am) * 4),
                       "f"(sa * sb)
                       : "memory");
        }
      }
      // B rows nr and nr + 8: bytes 32t .. 32t + 31 (word s: step s), as FP16 fragments.
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = nr + 8 * r;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const uint32_t src = tile_b + row * 128 + (((2 * t + i) ^ (row & 7)) << 4);
          uint32_t wb[4];
          asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                       : "=r"(wb[0]), "=r"(wb[1]), "=r"(wb[2]), "=r"(wb[3])
                       : "r"(src));
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            fr[4 * i + j][r] = fp8x2_to_half2(wb[j], 0);      // row g / g+8, columns 2t, 2t+1
            fr[4 * i + j][2 + r] = fp8x2_to_half2(wb[j], 1);  // columns 2t+8, 2t+9
          }
        }
      }
      // The copy is complete and visible to the tensor cores before any MMA reads it, and
      // the FP8 stage is free.
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      named_barrier(1, C::kConsumers);
      __syncwarp();
      if (lane == 0) mbar_arrive(empty_bar(stage));
      fence_regs(tc);
      cute::warpgroup_arrive();
      const uint64_t desc = smem_desc(dst);
#pragma unroll
      for (int s = 0; s < 8; ++s) {
        mma_rs<Mma16Rs>(fr[s][0], fr[s][1], fr[s][2], fr[s][3],
                        desc + (s / 4) * (C::kSubA >> 4) + 2 * (s % 4), tc, s > 0);
      }
      cute::warpgroup_commit_batch();
      if (++copy == kCopies) copy = 0;
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1;
      }
    };
    // A block whose MMAs are done, folded into the accumulator: column 8j + 2t + e is A row
    // 8j + 2t + e (rows g and g + 8 of the quarter are B rows).
    auto promote = [&](const float(&tp)[kAcc], int slot) {
#pragma unroll
      for (int j = 0; j < kAcc / 4; ++j) {
        float s0, s1;
        asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];"
                     : "=f"(s0), "=f"(s1)
                     : "r"(scale_slots + (slot * C::kBlockM + 8 * j + 2 * t) * 4));
        acc[4 * j] = fmaf(tp[4 * j], s0, acc[4 * j]);
        acc[4 * j + 1] = fmaf(tp[4 * j + 1], s1, acc[4 * j + 1]);
        acc[4 * j + 2] = fmaf(tp[4 * j + 2], s0, acc[4 * j + 2]);
        acc[4 * j + 3] = fmaf(tp[4 * j + 3], s1, acc[4 * j + 3]);
      }
    };
    auto step = [&](float(&tc)[kAcc], uint32_t(&fc)[8][4], float(&tp)[kAcc], uint32_t(&fp)[8][4]) {
      issue(tc, fc);
      cute::warpgroup_wait<1>();
      fence_regs(tp);
#pragma unroll
      for (auto& f : fp) fence_regs(f);  // free for the next block's fragments
      promote(tp, prev_copy);
    };
    issue(t0, f0);
    int kb = w.kb0 + 1;
    for (; kb + 1 < w.kb1; kb += 2) {
      step(t1, f1, t0, f0);
      step(t0, f0, t1, f1);
    }
    if (kb < w.kb1) {
      step(t1, f1, t0, f0);
      cute::warpgroup_wait<0>();
      fence_regs(t1);
      promote(t1, cur_copy);
    } else {
      cute::warpgroup_wait<0>();
      fence_regs(t0);
      promote(t0, cur_copy);
    }
    // Epilogue: the thread holds output rows m = 8j + 2t + {0, 1} at columns nr and nr + 8.
    // Neighbouring g swap one value so that each stores a pair of adjacent columns: even g
    // the row 8j + 2t at (nr, nr + 1), odd g the row 8j + 2t + 1 at (nr - 1, nr). N is a
    // multiple of 8, so a pair is inside or outside together.
    const int odd = g & 1;
    const int col0 = w.n0 + nr - odd;
    auto store = [&](auto* out, int64_t pitch, auto pack) {
      using Pair = decltype(pack(0.0f, 0.0f));
#pragma unroll
      for (int j = 0; j < kAcc / 4; ++j) {
        const int row = w.m0 + 8 * j + 2 * t + odd;
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const float v0 = acc[4 * j + 2 * hh], v1 = acc[4 * j + 2 * hh + 1];
          const float other = __shfl_xor_sync(0xffffffffu, odd ? v0 : v1, 4);
          const int col = col0 + 8 * hh;
          if (row < p.m && col < p.n) {
            *reinterpret_cast<Pair*>(out + row * pitch + col) = odd ? pack(other, v1) : pack(v0, other);
          }
        }
      }
    };
    if (p.splits == 1) {
      store(p.d, p.ldd, [](float x, float y) { return __floats2bfloat162_rn(x, y); });
    } else {
      store(p.partials + static_cast<int64_t>(w.slice) * p.m * p.n, static_cast<int64_t>(p.n),
            [](float x, float y) { return make_float2(x, y); });
    }
  }
}

template <int kGroups, bool kExact>
__global__ void __launch_bounds__(Config<kGroups, kExact>::kThreads, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const Params p) {
  using C = Config<kGroups, kExact>;
  constexpr int kStages = C::kStages;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023) & ~1023u;
  const uint32_t staging = base + kStages * C::kStageBytes;
  const uint32_t bars = staging + C::kStagingBytes;
  auto full_bar = [&](int s) { return bars + 8 * s; };
  auto empty_bar = [&](int s) { return bars + 8 * (kStages + s); };
  auto tile_a = [&](int s) { return base + s * C::kStageBytes; };
  auto tile_b = [&](int s) { return base + s * C::kStageBytes + C::kTileA; };

  const int tiles_m = (p.m + C::kBlockM - 1) / C::kBlockM;
  const int tiles = tiles_m * ((p.n + kBlockN - 1) / kBlockN);
  const int kblocks = (p.k + kBlockK - 1) / kBlockK;
  const int units = tiles * p.splits;
  // Warp-uniform for the compiler (descriptor arithmetic in uniform registers).
  const int warp_group = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);

  init_stage_ring(bars, kStages, C::kConsumers / 32, &map_a, &map_b);  // per consumer warp
  __syncthreads();
  wait_prior_grid();    // launched as a dependent of the operand preparation
  launch_dependents();  // the slices' reduction may start its CTAs (they wait for us)

  // Unit u: tile u % tiles (column tiles fastest) over K slice u / tiles, the K blocks
  // [kb0, kb1).
  struct Unit {
    int m0, n0, slice, kb0, kb1;
  };
  auto unit_at = [&](int u) {
    const int s = u / tiles;
    const int t = u - s * tiles;
    const int tm = t % tiles_m;
    return Unit{tm * C::kBlockM, (t / tiles_m) * kBlockN, s,
                static_cast<int>(int64_t(s) * kblocks / p.splits),
                static_cast<int>(int64_t(s + 1) * kblocks / p.splits)};
  };

  if (warp_group == C::kConsumerGroups) {
    // Producer warp: one thread issues the TMA loads of every block of the CTA's units as
    // stages free up.
    if constexpr (kExact) {
      asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(C::kProducerRegs));
    }
    if (threadIdx.x == C::kConsumers) {
      // With one row of tiles each block of B is read once: its lines go first.
      const bool stream_b = tiles_m == 1;
      const uint64_t policy = l2_evict_first_policy();
      int stage = 0;
      uint32_t phase = 0;
      for (int u = blockIdx.x; u < units; u += gridDim.x) {
        const Unit w = unit_at(u);
        for (int kb = w.kb0; kb < w.kb1; ++kb) {
          mbar_wait(empty_bar(stage), phase ^ 1);
          mbar_arrive_expect_tx(full_bar(stage), C::kStageBytes);
          tma_load_2d(tile_a(stage), &map_a, full_bar(stage), kb * kBlockK, w.m0);
          if (stream_b) {
            tma_load_2d_hint(tile_b(stage), &map_b, full_bar(stage), kb * kBlockK, w.n0, policy);
          } else {
            tma_load_2d(tile_b(stage), &map_b, full_bar(stage), kb * kBlockK, w.n0);
          }
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    }
    __syncwarp();
    return;
  }

  if constexpr (kExact) {
    register_exact_consumers<C>(p, units, unit_at, warp_group, base, staging, full_bar, empty_bar);
    return;
  }

  const int tid = threadIdx.x % 128;
  const int warp = tid / 32, lane = tid % 32;
  const int rows_half = warp_group / 2, cols_half = warp_group % 2;
  const int row = rows_half * 64 + warp * 16 + lane / 4;  // in the tile; also row + 8
  const uint64_t desc_a0 = smem_desc(tile_a(0) + rows_half * 64 * kBlockK);
  const uint64_t desc_b0 = smem_desc(tile_b(0) + cols_half * 64 * kBlockK);
  constexpr uint32_t kStageDesc = C::kStageBytes >> 4;
  int stage = 0;
  uint32_t phase = 0;
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const Unit w = unit_at(u);
    float acc[kAcc], t0[kAcc], t1[kAcc];  // t1: overlapped builds only
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
    // The block whose MMAs were issued last (`cur_*`) and the one before it (`prev_*`):
    // stage and scales.
    int cur_stage = 0, prev_stage = 0;
    float cur_lo = 0.0f, cur_hi = 0.0f, prev_lo = 0.0f, prev_hi = 0.0f;
    // Block scales from global memory (any layout), loaded one block ahead of their use.
    // Rows past M compute on TMA's zero fill; their scales are read from the last row.
    const float* pa_lo = p.sfa + static_cast<int64_t>(min(w.m0 + row, p.m - 1)) * p.sfa_stride_m +
                         static_cast<int64_t>(w.kb0) * p.sfa_stride_k;
    const float* pa_hi = p.sfa + static_cast<int64_t>(min(w.m0 + row + 8, p.m - 1)) * p.sfa_stride_m +
                         static_cast<int64_t>(w.kb0) * p.sfa_stride_k;
    const float* pb = p.sfb + static_cast<int64_t>(w.n0 / 128) * p.sfb_stride_n +
                      static_cast<int64_t>(w.kb0) * p.sfb_stride_k;
    float na_lo = __ldg(pa_lo), na_hi = __ldg(pa_hi), nb = __ldg(pb);
    int left = w.kb1 - w.kb0;  // blocks not yet issued
    auto issue = [&](float(&tc)[kAcc]) {
      prev_stage = cur_stage;
      prev_lo = cur_lo;
      prev_hi = cur_hi;
      cur_lo = na_lo * nb;
      cur_hi = na_hi * nb;
      if (--left > 0) {
        pa_lo += p.sfa_stride_k;
        pa_hi += p.sfa_stride_k;
        pb += p.sfb_stride_k;
        na_lo = __ldg(pa_lo);
        na_hi = __ldg(pa_hi);
        nb = __ldg(pb);
      }
      mbar_wait(full_bar(stage), phase);
      cur_stage = stage;
      fence_regs(tc);
      cute::warpgroup_arrive();
#pragma unroll
      for (int kk = 0; kk < kBlockK / 32; ++kk) {
        mma<Mma>(desc_a0 + stage * kStageDesc + 2 * kk, desc_b0 + stage * kStageDesc + 2 * kk, tc,
                 kk > 0);
      }
      cute::warpgroup_commit_batch();
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1;
      }
    };
    // A block whose MMAs are done: its temporary folded into the accumulator (element i
    // sits in row +0 if i % 4 < 2, else +8), its stage released.
    auto finish = [&](const float(&tp)[kAcc], int st, float s_lo, float s_hi) {
#pragma unroll
      for (int j = 0; j < kAcc; ++j) acc[j] = fmaf(tp[j], (j % 4 < 2) ? s_lo : s_hi, acc[j]);
      __syncwarp();
      if (lane == 0) mbar_arrive(empty_bar(st));
    };
    if constexpr (C::kOverlap) {
      // Two temporaries: block kb's MMAs run while block kb - 1 is promoted.
      auto step = [&](float(&tc)[kAcc], float(&tp)[kAcc]) {
        issue(tc);
        cute::warpgroup_wait<1>();
        fence_regs(tp);
        finish(tp, prev_stage, prev_lo, prev_hi);
      };
      issue(t0);
      int kb = w.kb0 + 1;
      for (; kb + 1 < w.kb1; kb += 2) {
        step(t1, t0);
        step(t0, t1);
      }
      if (kb < w.kb1) {
        step(t1, t0);
        cute::warpgroup_wait<0>();
        fence_regs(t1);
        finish(t1, cur_stage, cur_lo, cur_hi);
      } else {
        cute::warpgroup_wait<0>();
        fence_regs(t0);
        finish(t0, cur_stage, cur_lo, cur_hi);
      }
    } else {
      for (int kb = w.kb0; kb < w.kb1; ++kb) {
        issue(t0);
        cute::warpgroup_wait<0>();
        fence_regs(t0);
        finish(t0, cur_stage, cur_lo, cur_hi);
      }
    }
    // Column group j holds columns 8j + 2 (lane % 4) + {0, 1} of the half; n is a
    // multiple of 8, so a pair is inside or outside together.
    // Stored as bf16 pairs into the output, or as float pairs into the slice's plane.
    const int r_lo = w.m0 + row, r_hi = r_lo + 8;
    const int c0 = w.n0 + cols_half * 64 + 2 * (lane % 4);
    auto store = [&](auto* out, int64_t pitch, auto pack) {
      using Pair = decltype(pack(0.0f, 0.0f));
#pragma unroll
      for (int j = 0; j < kAcc / 4; ++j) {
        const int col = c0 + 8 * j;
        if (col >= p.n) continue;
        if (r_lo < p.m) {
          *reinterpret_cast<Pair*>(out + r_lo * pitch + col) = pack(acc[4 * j], acc[4 * j + 1]);
        }
        if (r_hi < p.m) {
          *reinterpret_cast<Pair*>(out + r_hi * pitch + col) = pack(acc[4 * j + 2], acc[4 * j + 3]);
        }
      }
    };
    if (p.splits == 1) {
      store(p.d, p.ldd, [](float x, float y) { return __floats2bfloat162_rn(x, y); });
    } else {
      store(p.partials + static_cast<int64_t>(w.slice) * p.m * p.n, static_cast<int64_t>(p.n),
            [](float x, float y) { return make_float2(x, y); });
    }
  }
}

// Exact mode takes 64-row tiles only.
int groups_for(const GemmArgs& g, bool exact) { return g.m <= 64 || exact ? 1 : 2; }

int sms_of(const GemmArgs& g) { return g.sm_count > 0 ? g.sm_count : 132; }

int tiles_for(const GemmArgs& g, bool exact) {
  const int bm = 64 * groups_for(g, exact);
  return ((g.m + bm - 1) / bm) * ((g.n + kBlockN - 1) / kBlockN);
}

// K slices: as many as keep the units within one per SM (at most one per K block and
// kMaxSplits); g.splits > 0 overrides.
int splits_for(const GemmArgs& g, bool exact) {
  const int kblocks = (g.k + kBlockK - 1) / kBlockK;
  if (g.splits > 0) return g.splits;
  const int tiles = tiles_for(g, exact);
  const int sms = sms_of(g);
  int s = tiles >= sms ? 1 : sms / tiles;
  if (s > kblocks) s = kblocks;
  if (s > kMaxSplits) s = kMaxSplits;
  return s < 1 ? 1 : s;
}

size_t partials_bytes(const GemmArgs& g, int splits) {
  return splits > 1 ? static_cast<size_t>(splits) * g.m * g.n * sizeof(float) : 0;
}

template <int kGroups, bool kExact>
Status launch(const GemmArgs& g, int splits, float* partials, cudaStream_t stream, const char** why) {
  using C = Config<kGroups, kExact>;
  CUtensorMap map_a, map_b;
  const auto u8 = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  if (!make_map(&map_a, u8, 1, g.a, g.m, g.k, g.lda, C::kBlockM, kBlockK) ||
      !make_map(&map_b, u8, 1, g.b, g.n, g.k, g.ldb, kBlockN, kBlockK)) {
    if (why) *why = "cuTensorMapEncodeTiled failed for an operand";
    return Status::kLaunchFailed;
  }
  static uint64_t smem_reserved = 0;
  if (!reserve_smem_once(gemm_kernel<kGroups, kExact>, g.device, C::kSmemBytes, &smem_reserved)) {
    if (why) *why = "cannot reserve the kernel's shared memory";
    return Status::kLaunchFailed;
  }
  const Params p{problem_params(g), splits, static_cast<__nv_bfloat16*>(g.d), g.ldd, partials};
  const int64_t units = static_cast<int64_t>(tiles_for(g, kExact)) * splits;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(units < sms_of(g) ? units : sms_of(g)));
  cfg.blockDim = dim3(C::kThreads);
  cfg.dynamicSmemBytes = C::kSmemBytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = g.pdl ? 1 : 0;
  if (cudaLaunchKernelEx(&cfg, gemm_kernel<kGroups, kExact>, map_a, map_b, p) != cudaSuccess) {
    if (why) *why = cudaGetErrorString(cudaGetLastError());
    return Status::kLaunchFailed;
  }
  return Status::kOk;
}

template <bool kExact>
Status run(const GemmArgs& g, void* ws, cudaStream_t stream, const char** why) {
  if (!sm90::tma_operands_ok(g, why)) return Status::kUnsupported;
  const int kblocks = (g.k + kBlockK - 1) / kBlockK;
  const int splits = splits_for(g, kExact);
  if (splits < 1 || splits > kMaxSplits || splits > kblocks) {
    if (why) *why = "splits must be 1 to 64 and at most one per 128 of K";
    return Status::kUnsupported;
  }
  if (static_cast<int64_t>(tiles_for(g, kExact)) * splits > INT32_MAX) {
    if (why) *why = "too many work units";
    return Status::kUnsupported;
  }
  float* partials = static_cast<float*>(ws);
  if (splits > 1 && partials == nullptr) {
    if (why) *why = "split-K needs its workspace";
    return Status::kUnsupported;
  }
  Status st;
  if constexpr (kExact) {
    st = launch<1, true>(g, splits, partials, stream, why);
  } else {
    st = groups_for(g, false) == 1 ? launch<1, false>(g, splits, partials, stream, why)
                                   : launch<2, false>(g, splits, partials, stream, why);
  }
  if (st != Status::kOk || splits == 1) return st;
  if (reduce_splits(partials, splits, g.m, g.n, g.d, g.ldd, g.sm_count, stream) != Status::kOk) {
    if (why) *why = "split-K reduction launch failed";
    return Status::kLaunchFailed;
  }
  return Status::kOk;
}

}  // namespace
}  // namespace kfgemm::fewrow

namespace kfgemm::variants {

size_t fp8_fewrow_workspace(const GemmArgs& g) {
  return fewrow::partials_bytes(g, fewrow::splits_for(g, false));
}

Status fp8_fewrow_run(const GemmArgs& g, void* ws, cudaStream_t stream, const char** why) {
  return fewrow::run<false>(g, ws, stream, why);
}

size_t fp8_fewrow_exact_workspace(const GemmArgs& g) {
  return fewrow::partials_bytes(g, fewrow::splits_for(g, true));
}

Status fp8_fewrow_exact_run(const GemmArgs& g, void* ws, cudaStream_t stream, const char** why) {
  return fewrow::run<true>(g, ws, stream, why);
}

}  // namespace kfgemm::variants
