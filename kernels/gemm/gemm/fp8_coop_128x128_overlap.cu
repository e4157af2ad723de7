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
//  - warp group 0, warp 0: lane 0 issues TMA loads of A (128x128 bytes) and B (128x128)
//    per K block into a ring of stages (128-byte swizzle, the layout wgmma reads); for
//    scale layouts whose K blocks are not contiguous the warp also copies the block's
//    scales into the stage (cp.async);
//  - warp groups 1 and 2: 64 rows of the tile each, wgmma m64n128k32; scales read two
//    blocks ahead from global memory (row-major A scales) or from the stage; bf16
//    results staged in shared memory one 64x64 box at a time and stored by TMA.
//
// Status (NOTES.md, v9 and v10): the op picks it instead of CUTLASS's cooperative kernel
// for row-major A scales (H200, interleaved: 4096x7168x16384 851 vs 929 us, cuBLASLt
// 872). What made the first version 25-30% slower than CUTLASS was the consumer warps'
// instruction stream, not the tensor cores: Nsight Compute's per-instruction samples
// showed them never waiting for the MMAs, about 170 instructions per K block against
// CUTLASS's 120, and the block-scale loads' latency exposed every block. The path that
// stages scales in shared memory is correct and faster for column-major scales with
// K <= 2304, but compute-sanitizer racecheck reports its cp.async copies against the
// consumers' reads, so it is reachable only as an explicit `variant=10`.
//
// Operands as in GemmArgs: A (m, k) and B (n, k) K-major with 16-byte aligned row
// pitches, k padded to a multiple of 16 with zeros. TMA fills rows and columns past the
// ends with zeros, so partial tiles need no special casing in the mainloop.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <atomic>
#include <cstdint>
#include <utility>

#include "cute/arch/mma_sm90_gmma.hpp"
#include "gemm_api.h"

namespace kfgemm::overlap {
namespace {

constexpr int kBlockM = 128;
constexpr int kBlockN = 128;
constexpr int kBlockK = 128;  // bytes of K per stage row = one scale block
constexpr int kStages = 6;
constexpr int kThreads = 384;  // producer warp group + two consumer warp groups
constexpr int kGroupRows = 8;  // tile rows per band of the tile order
constexpr uint32_t kTileABytes = kBlockM * kBlockK;
constexpr uint32_t kTileBBytes = kBlockN * kBlockK;
constexpr uint32_t kStageBytes = kTileABytes + kTileBBytes;
// Block scales per stage, copied in by the producer warp: the tile's 128 A row scales
// and its one B scale (padded to 16 bytes).
constexpr uint32_t kScaleBytes = kBlockM * 4 + 16;
// Output staging per consumer warp group: one 64x64 bf16 box in the 128-byte swizzle,
// written to global memory by TMA (a warp group's 64x128 half tile is two boxes).
constexpr uint32_t kOutBoxBytes = 64 * 64 * 2;
constexpr uint32_t kOutBytes = 2 * kOutBoxBytes;
// Tiles, output staging, scales, barriers (full and empty per stage), and slack to align
// the tiles to 1024 bytes (the 128-byte swizzle atom).
constexpr size_t kSmemBytes = kStages * (kStageBytes + kScaleBytes) + kOutBytes +
                              2 * kStages * sizeof(uint64_t) + 1024;
static_assert(kSmemBytes <= 227 * 1024, "shared memory of one SM");
static_assert(kStageBytes % 1024 == 0 && kOutBoxBytes % 1024 == 0 && kScaleBytes % 16 == 0,
              "tiles and output boxes stay 1024-byte aligned, scales 16-byte aligned");

struct Params {
  int m, n, k;
  const float* sfa;
  int64_t sfa_stride_m, sfa_stride_k;
  const float* sfb;
  int64_t sfb_stride_n, sfb_stride_k;
};

// ---- PTX wrappers ---------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// 4-byte copy global -> shared, completed asynchronously (cp.async).
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}

// Arrives on the mbarrier once all of this thread's earlier cp.async copies are done;
// the arrival is counted in the barrier's expected count (.noinc).
__device__ __forceinline__ void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, uint32_t src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(src), "r"(c0), "r"(c1)
               : "memory");
}

__device__ __forceinline__ float ld_shared_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// wgmma shared-memory descriptor of a K-major tile written by TMA with the 128-byte
// swizzle: rows of 128 bytes, 8-row atoms 1024 bytes apart. Stepping K by 32 bytes
// inside the atom is an offset of the start address (2 in units of 16 bytes).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
  uint64_t desc = (addr & 0x3FFFF) >> 4;
  desc |= uint64_t(1) << 16;            // leading byte offset (unused with swizzling)
  desc |= uint64_t(1024 >> 4) << 32;    // stride byte offset: next 8-row atom
  desc |= uint64_t(1) << 62;            // 128-byte swizzle
  return desc;
}

using Mma = cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_SS_TN<>;

template <size_t... I>
__device__ __forceinline__ void mma_impl(uint64_t da, uint64_t db, float (&d)[64], bool accumulate,
                                         std::index_sequence<I...>) {
  Mma::fma(da, db, d[I]..., accumulate ? cute::SM90::GMMA::ScaleOut::One : cute::SM90::GMMA::ScaleOut::Zero);
}

__device__ __forceinline__ void fence_regs(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The MMAs of one K block (4 x k32) into `t`, overwriting it.
__device__ __forceinline__ void issue_block(float (&t)[64], uint64_t da, uint64_t db) {
  fence_regs(t);
  cute::warpgroup_arrive();
#pragma unroll
  for (int kk = 0; kk < kBlockK / 32; ++kk) {
    mma_impl(da + 2 * kk, db + 2 * kk, t, kk > 0, std::make_index_sequence<64>{});
  }
  cute::warpgroup_commit_batch();
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

__device__ __forceinline__ TileCoord tile_coord(int t, int tiles_m, int tiles_n) {
  const int band_tiles = kGroupRows * tiles_n;
  const int band = t / band_tiles;
  const int within = t - band * band_tiles;
  const int rows = min(kGroupRows, tiles_m - band * kGroupRows);
  return {(band * kGroupRows + within % rows) * kBlockM, (within / rows) * kBlockN};
}

// ---- the kernel -----------------------------------------------------------------------

template <bool kScalesSmem>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const __grid_constant__ CUtensorMap map_d, const Params p) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t tiles_base = (raw + 1023) & ~1023u;
  // Tiles and output boxes 1024-byte aligned (the swizzle atom), then scales, barriers.
  const uint32_t out_base = tiles_base + kStages * kStageBytes;
  const uint32_t scales_base = out_base + kOutBytes;
  const uint32_t bars = scales_base + kStages * kScaleBytes;
  auto full_bar = [&](int s) { return bars + 8 * s; };
  auto empty_bar = [&](int s) { return bars + 8 * (kStages + s); };
  auto tile_a = [&](int s) { return tiles_base + s * kStageBytes; };
  auto tile_b = [&](int s) { return tiles_base + s * kStageBytes + kTileABytes; };
  auto scales_a = [&](int s) { return scales_base + s * kScaleBytes; };
  auto scale_b = [&](int s) { return scales_base + s * kScaleBytes + kBlockM * 4; };

  // Made warp-uniform for the compiler, so that descriptor and stage arithmetic stays
  // in uniform registers.
  const int warp_group = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  const int tid = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      // The TMA issue, plus the producer warp's scale copies when it stages them.
      mbar_init(full_bar(s), kScalesSmem ? 1 + 32 : 1);
      mbar_init(empty_bar(s), 8);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&map_a)) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&map_b)) : "memory");
  }
  __syncthreads();
  // Launched as a programmatic dependent of the operand preparation: nothing below may
  // read its output before that grid has completed (a no-op otherwise).
  asm volatile("griddepcontrol.wait;" ::: "memory");

  const int tiles_m = (p.m + kBlockM - 1) / kBlockM;
  const int tiles_n = (p.n + kBlockN - 1) / kBlockN;
  const int tiles = tiles_m * tiles_n;
  const int kblocks = (p.k + kBlockK - 1) / kBlockK;

  if (warp_group == 0) {
    // Producer: warp 0. Lane 0 issues the TMA loads of A and B; with staged scales every
    // lane also copies four of the tile's 128 A row scales (and lane 0 the B scale) with
    // cp.async, whose completion arrives on the same barrier. Consumers read the scales from shared
    // memory once the stage is full, far ahead of their use, wherever they lie in
    // global memory (L1 misses on column-major scales cost a full L2 latency per block).
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (tid >= 32) return;
    int stage = 0;
    uint32_t phase = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      const TileCoord c = tile_coord(t, tiles_m, tiles_n);
      // Rows past M compute on TMA's zero fill; their scales are read from the last row.
      const float* sa[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        sa[j] = p.sfa + static_cast<int64_t>(min(c.m0 + tid + 32 * j, p.m - 1)) * p.sfa_stride_m;
      }
      const float* sb = p.sfb + static_cast<int64_t>(c.n0 / 128) * p.sfb_stride_n;
      for (int kb = 0; kb < kblocks; ++kb) {
        mbar_wait(empty_bar(stage), phase ^ 1);
        if (tid == 0) {
          mbar_arrive_expect_tx(full_bar(stage), kStageBytes);
          tma_load_2d(tile_a(stage), &map_a, full_bar(stage), kb * kBlockK, c.m0);
          tma_load_2d(tile_b(stage), &map_b, full_bar(stage), kb * kBlockK, c.n0);
        }
        if constexpr (kScalesSmem) {
          if (tid == 0) cp_async_4(scale_b(stage), sb);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            cp_async_4(scales_a(stage) + (tid + 32 * j) * 4, sa[j]);
            sa[j] += p.sfa_stride_k;
          }
          sb += p.sfb_stride_k;
          cp_async_arrive(full_bar(stage));
        }
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int consumer = warp_group - 1;  // 64-row half of the tile
  const int warp = tid / 32, lane = tid % 32;
  const int row_in_tile = consumer * 64 + warp * 16 + lane / 4;
  const int col_in_tile = (lane % 4) * 2;

  // Shared-memory descriptors of stage 0 (this warp group's 64 rows of A, all of B).
  // A stage is kStageBytes further on, a k32 step 32 bytes: both only move the start
  // address field (bits 0-13, in 16-byte units), which never carries into the rest.
  const uint64_t desc_a0 = smem_desc(tile_a(0) + consumer * 64 * kBlockK);
  const uint64_t desc_b0 = smem_desc(tile_b(0));
  constexpr uint32_t kStageDesc = kStageBytes >> 4;

  int stage = 0;
  uint32_t phase = 0;
  auto advance = [&]() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  };
  // Block scales of the thread's two rows and of the tile's columns, for the blocks in
  // flight: set kb % 2 holds block kb's. Multiplied at the promotion, so that nothing
  // waits for the shared-memory reads right after they are issued.
  float sa_lo[2], sa_hi[2], sb[2];
  // Waits for the next stage's operands, issues its MMAs into `t` and reads its scales
  // into set `set` (used one step later, when the block is promoted).
  auto issue_next = [&](float (&t)[64], int set) {
    mbar_wait(full_bar(stage), phase);
    const uint32_t off = stage * kStageDesc;
    issue_block(t, desc_a0 + off, desc_b0 + off);
    if constexpr (kScalesSmem) {
      sb[set] = ld_shared_f32(scale_b(stage));
      sa_lo[set] = ld_shared_f32(scales_a(stage) + row_in_tile * 4);
      sa_hi[set] = ld_shared_f32(scales_a(stage) + (row_in_tile + 8) * 4);
    }
    advance();
  };
  // Stages are handed back to the producer in the order they were issued, by every warp
  // once all its lanes have read the stage's scales: a single arrival per warp group
  // would not order the other warps' reads before the producer's next copy into the
  // stage (compute-sanitizer racecheck reported exactly that).
  int release_stage = 0;
  auto release = [&]() {
    __syncwarp();
    if (lane == 0) mbar_arrive(empty_bar(release_stage));
    if (++release_stage == kStages) release_stage = 0;
  };

  float acc[64], t0[64], t1[64];

  // Epilogue: the warp group's 64x128 half tile as bf16, one 64x64 box at a time, into
  // shared memory (128-byte swizzle: the 8 rows a warp writes at once hit 8 different
  // 16-byte chunks, no bank conflicts), then one thread hands the box to TMA, which
  // clips rows and columns past the ends. The staging buffer is reused once the
  // previous store has read it.
  const uint32_t out_box = out_base + consumer * kOutBoxBytes;
  const int out_row = warp * 16 + lane / 4;  // row within the half tile (and +8)
  auto store_tile = [&](const TileCoord& tc) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if (tid == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
      named_barrier(1 + consumer, 128);
#pragma unroll
      for (int i = half * 32; i < half * 32 + 32; i += 2) {
        const int row = out_row + ((i % 4 < 2) ? 0 : 8);
        const int col = ((i / 4) % 8) * 8 + col_in_tile;  // within the box's 64 columns
        const uint32_t addr = out_box + row * 128 + (((col / 8) ^ (row % 8)) * 16) + (col % 8) * 2;
        const __nv_bfloat162 v = __floats2bfloat162_rn(acc[i], acc[i + 1]);
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr),
                     "r"(*reinterpret_cast<const uint32_t*>(&v))
                     : "memory");
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      named_barrier(1 + consumer, 128);
      if (tid == 0) {
        tma_store_2d(&map_d, out_box, tc.n0 + half * 64, tc.m0 + consumer * 64);
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      }
    }
  };

  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const TileCoord c = tile_coord(tile, tiles_m, tiles_n);
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    const int r = c.m0 + row_in_tile;
    const float* pa_lo = p.sfa + static_cast<int64_t>(min(r, p.m - 1)) * p.sfa_stride_m;
    const float* pa_hi = p.sfa + static_cast<int64_t>(min(r + 8, p.m - 1)) * p.sfa_stride_m;
    const float* pbs = p.sfb + static_cast<int64_t>(c.n0 / 128) * p.sfb_stride_n;
    auto load_scales = [&](int set) {
      sa_lo[set] = __ldg(pa_lo);
      sa_hi[set] = __ldg(pa_hi);
      sb[set] = __ldg(pbs);
      pa_lo += p.sfa_stride_k;
      pa_hi += p.sfa_stride_k;
      pbs += p.sfb_stride_k;
    };
    if constexpr (!kScalesSmem) {
      load_scales(0);
      if (kblocks > 1) load_scales(1);
    }

    // One step: issue block kb into `cur` (its scales into set kb % 2), then promote
    // block kb-1 from `prev` with the other set.
    auto step = [&](float (&cur)[64], float (&prev)[64], int set, int kb) {
      issue_next(cur, set);
      cute::warpgroup_wait<1>();
      fence_regs(prev);
      promote(acc, prev, sa_lo[set ^ 1] * sb[set ^ 1], sa_hi[set ^ 1] * sb[set ^ 1]);
      release();
      if constexpr (!kScalesSmem) {
        if (kb + 1 < kblocks) load_scales(set ^ 1);
      }
    };

    issue_next(t0, 0);
    int kb = 1;
    for (; kb + 1 < kblocks; kb += 2) {
      step(t1, t0, 1, kb);
      step(t0, t1, 0, kb + 1);
    }
    // The last one or two blocks.
    if (kb < kblocks) {
      step(t1, t0, 1, kb);
      cute::warpgroup_wait<0>();
      fence_regs(t1);
      promote(acc, t1, sa_lo[1] * sb[1], sa_hi[1] * sb[1]);
    } else {
      cute::warpgroup_wait<0>();
      fence_regs(t0);
      promote(acc, t0, sa_lo[0] * sb[0], sa_hi[0] * sb[0]);  // kb - 1 is even
    }
    release();
    store_tile(c);
  }
  // Shared memory must outlive the last store's reads.
  if (tid == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// ---- host side ------------------------------------------------------------------------

using EncodeTiled = PFN_cuTensorMapEncodeTiled_v12000;

EncodeTiled encode_fn() {
  static EncodeTiled fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult res{};
#if CUDART_VERSION >= 12050
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault,
                                         &res) != cudaSuccess) {
      ptr = nullptr;
    }
#else
    if (cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &ptr, cudaEnableDefault, &res) !=
        cudaSuccess) {
      ptr = nullptr;
    }
#endif
    return res == cudaDriverEntryPointSuccess ? reinterpret_cast<EncodeTiled>(ptr) : nullptr;
  }();
  return fn;
}

// A (rows, cols) row-major matrix with a pitch of `ld` elements, moved in boxes of
// box_rows x box_cols with the 128-byte swizzle (box_cols * element size = 128).
bool make_map(CUtensorMap* map, CUtensorMapDataType type, int elem_bytes, const void* base,
              int64_t rows, int64_t cols, int64_t ld, uint32_t box_rows, uint32_t box_cols) {
  EncodeTiled encode = encode_fn();
  if (!encode) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld * elem_bytes)};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  return encode(map, type, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace
}  // namespace kfgemm::overlap

namespace kfgemm::variants {

size_t fp8_coop_128x128_overlap_workspace(const GemmArgs&) { return 0; }

Status fp8_coop_128x128_overlap_run(const GemmArgs& g, void*, cudaStream_t stream,
                                     const char** why) {
  using namespace kfgemm::overlap;
  if (g.m < 1 || g.n < 1 || g.k < 1 || g.k % 16 != 0 || g.n % 8 != 0 || g.lda % 16 != 0 ||
      g.ldb % 16 != 0 || g.ldd % 8 != 0 || reinterpret_cast<uintptr_t>(g.a) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(g.b) % 16 != 0 || reinterpret_cast<uintptr_t>(g.d) % 16 != 0) {
    if (why) {
      *why = "the kernel needs 16-byte aligned K-major operands and output, N a multiple of 8";
    }
    return Status::kUnsupported;
  }
  CUtensorMap map_a, map_b, map_d;
  const auto u8 = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  if (!make_map(&map_a, u8, 1, g.a, g.m, g.k, g.lda, kBlockM, kBlockK) ||
      !make_map(&map_b, u8, 1, g.b, g.n, g.k, g.ldb, kBlockN, kBlockK) ||
      !make_map(&map_d, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, g.d, g.m, g.n, g.ldd, 64, 64)) {
    if (why) *why = "cuTensorMapEncodeTiled failed for an operand or the output";
    return Status::kLaunchFailed;
  }
  // A scales with contiguous K blocks (row-major (M, KB)) are read by the consumers
  // straight from global memory: each 32-byte sector serves 8 blocks from L1. Other
  // layouts, such as the challenge's column-major scales, are staged in shared memory by
  // the producer warp, where a load per block would miss L1 every time (H200, 2026-11-21:
  // 4096x7168x16384 row-major 768 vs 842 us direct vs staged; 6144x4608x7168 column-major
  // 352 vs 381 us staged vs direct; NOTES.md, v10).
  const bool direct = g.sfa_stride_k == 1;
  auto kernel = direct ? gemm_kernel<false> : gemm_kernel<true>;
  // The shared-memory size is a per-device attribute of the function: set once per
  // device.
  static std::atomic<uint64_t> attribute_set[2];
  std::atomic<uint64_t>& set = attribute_set[direct];
  const uint64_t bit = g.device >= 0 && g.device < 64 ? uint64_t(1) << g.device : 0;
  if (!bit || !(set.load(std::memory_order_acquire) & bit)) {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(kSmemBytes)) != cudaSuccess) {
      if (why) *why = "cannot reserve the kernel's shared memory";
      return Status::kLaunchFailed;
    }
    set.fetch_or(bit, std::memory_order_release);
  }
  Params p{g.m,   g.n,         g.k,         g.sfa, g.sfa_stride_m,
           g.sfa_stride_k, g.sfb, g.sfb_stride_n, g.sfb_stride_k};
  const int tiles = ((g.m + kBlockM - 1) / kBlockM) * ((g.n + kBlockN - 1) / kBlockN);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(tiles < g.sm_count ? tiles : g.sm_count));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmemBytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = g.pdl ? 1 : 0;
  if (cudaLaunchKernelEx(&cfg, kernel, map_a, map_b, map_d, p) != cudaSuccess) {
    if (why) *why = cudaGetErrorString(cudaGetLastError());
    return Status::kLaunchFailed;
  }
  return Status::kOk;
}

}  // namespace kfgemm::variants
