// FP8 block-scaled GEMM for Hopper with 256x128 output tiles, written on TMA, mbarriers
// and wgmma like fp8_coop_128x128_overlap.cu, for the problems with many tiles.
//
//   D[m, n] = sum_k A[m, k] B[n, k] sfa[m, k/128] sfb[n/128, k/128]
//
// Why a taller tile (NOTES.md, v16): with every SM busy, the 128x128 kernels are bound
// by delivering their operands to the SMs, 32 KB per 128-deep K block, about 9 TB/s into
// the SMs on an H100 (the same kernel without its MMAs takes as long; without its loads
// it runs a third faster). A 256x128 tile brings 48 KB per K block for twice the MMAs:
// a quarter fewer bytes per FLOP.
//
// Layout of the work:
//  - one CTA per SM, persistent over 256x128 output tiles (grouped order: 8 tile rows
//    at a time walk across N, so that a wave of CTAs shares A and B tiles in L2);
//  - warp group 0, one thread: TMA loads of A (256x128 bytes) and B (128x128) per K
//    block into a ring of 4 stages (128-byte swizzle, the layout wgmma reads);
//  - warp groups 1 and 2: 128 rows of the tile each, as two 64-row halves. Per K block
//    a warp group runs a half's four wgmma m64n128k32 into a temporary accumulator,
//    waits for them and adds the temporary times the block scales into the half's FP32
//    accumulator, then the other half. The warp groups take turns issuing, so that one
//    promotes while the other's MMAs run. Registers hold two 64-float accumulators and one
//    temporary (the 128x128 kernel's overlap needs a second temporary, which does not
//    fit beside two accumulators); while one warp group promotes, the other's MMAs
//    keep the tensor cores busy;
//  - block scales read one K block ahead of their use (row-major scales: a 32-byte
//    sector serves 8 blocks from L1; the op copies other layouts row-major first);
//  - epilogue: each warp group writes its halves as bf16 through 16 KB of shared memory
//    (stmatrix) and TMA stores, one half after the other. The producer meanwhile loads
//    the next tile's first blocks.
//
// Operands as in GemmArgs: A (m, k) and B (n, k) K-major with 16-byte aligned row
// pitches, k padded to a multiple of 16 with zeros. TMA fills rows and columns past the
// ends with zeros, so partial tiles need no special casing in the mainloop.
#include <cuda_bf16.h>

#include <cstdint>

#include "cute/arch/mma_sm90_gmma.hpp"
#include "gemm_api.h"
#include "sm90_ptx.cuh"

namespace kfgemm::wide {
namespace {

using namespace kfgemm::sm90;

constexpr int kBlockM = 256;
constexpr int kBlockN = 128;
constexpr int kBlockK = 128;  // bytes of K per stage row = one scale block
constexpr int kStages = 4;
constexpr int kThreads = 384;  // producer warp group + two consumer warp groups
constexpr int kGroupRows = 8;  // tile rows per band of the tile order
constexpr uint32_t kTileABytes = kBlockM * kBlockK;
constexpr uint32_t kTileBBytes = kBlockN * kBlockK;
constexpr uint32_t kStageBytes = kTileABytes + kTileBBytes;
// Output staging per consumer warp group: one 64x128 half as two 64x64 bf16 boxes in
// the 128-byte swizzle, written to global memory by TMA.
constexpr uint32_t kOutBoxBytes = 64 * 64 * 2;
constexpr uint32_t kOutBytes = 2 * 2 * kOutBoxBytes;
constexpr size_t kSmemBytes = kStages * kStageBytes + kOutBytes + 2 * kStages * sizeof(uint64_t) + 1024;
static_assert(kSmemBytes <= 227 * 1024, "shared memory of one SM");
static_assert(kStageBytes % 1024 == 0 && kTileABytes % 1024 == 0 && kOutBoxBytes % 1024 == 0,
              "tiles and output boxes stay 1024-byte aligned");

using Mma = cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_SS_TN<>;

// The MMAs of one K block (4 x k32) of a 64-row half into `t`, overwriting it.
__device__ __forceinline__ void issue_block(float (&t)[64], uint64_t da, uint64_t db) {
  fence_regs(t);
  cute::warpgroup_arrive();
#pragma unroll
  for (int kk = 0; kk < kBlockK / 32; ++kk) {
    mma<Mma>(da + 2 * kk, db + 2 * kk, t, kk > 0);
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

// Tile t in bands of kGroupRows tile rows that walk across N.
__device__ __forceinline__ TileCoord tile_coord(int t, int tiles_m, int tiles_n) {
  const int band_tiles = kGroupRows * tiles_n;
  const int band = t / band_tiles;
  const int within = t - band * band_tiles;
  const int rows = min(kGroupRows, tiles_m - band * kGroupRows);
  return {(band * kGroupRows + within % rows) * kBlockM, (within / rows) * kBlockN};
}

__global__ void __launch_bounds__(kThreads, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const __grid_constant__ CUtensorMap map_d, const ProblemParams p) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t tiles_base = (raw + 1023) & ~1023u;
  const uint32_t out_base = tiles_base + kStages * kStageBytes;
  const uint32_t bars = out_base + kOutBytes;
  auto full_bar = [&](int s) { return bars + 8 * s; };
  auto empty_bar = [&](int s) { return bars + 8 * (kStages + s); };
  auto tile_a = [&](int s) { return tiles_base + s * kStageBytes; };
  auto tile_b = [&](int s) { return tiles_base + s * kStageBytes + kTileABytes; };

  // Registers per thread after setmaxnreg, out of the launch's 168: two accumulators
  // and a temporary of 64 floats each for the consumers.
  constexpr uint32_t kProducerRegs = 40;
  constexpr uint32_t kConsumerRegs = 232;
  static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= kThreads * 168,
                "setmaxnreg asks for more registers than the launch holds");
  const int warp_group = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  const int tid = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_bar(s), 1);   // the TMA issue (plus its transaction bytes)
      mbar_init(empty_bar(s), 8);  // one arrival per consumer warp
    }
    mbar_init_fence();
    prefetch_tensormap(&map_a);
    prefetch_tensormap(&map_b);
  }
  __syncthreads();
  // Launched as a programmatic dependent of the operand preparation.
  wait_prior_grid();

  const int tiles_m = (p.m + kBlockM - 1) / kBlockM;
  const int tiles_n = (p.n + kBlockN - 1) / kBlockN;
  const int tiles = tiles_m * tiles_n;
  const int kblocks = (p.k + kBlockK - 1) / kBlockK;

  if (warp_group == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kProducerRegs));
    if (tid != 0) return;
    int stage = 0;
    uint32_t phase = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      const TileCoord c = tile_coord(t, tiles_m, tiles_n);
      for (int kb = 0; kb < kblocks; ++kb) {
        mbar_wait(empty_bar(stage), phase ^ 1);
        mbar_arrive_expect_tx(full_bar(stage), kStageBytes);
        tma_load_2d(tile_a(stage), &map_a, full_bar(stage), kb * kBlockK, c.m0);
        tma_load_2d(tile_b(stage), &map_b, full_bar(stage), kb * kBlockK, c.n0);
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kConsumerRegs));
  const int consumer = warp_group - 1;  // 128-row half of the tile
  const int warp = tid / 32, lane = tid % 32;
  // The thread's accumulator rows within its 64-row half: fragment rows g and g + 8.
  const int row_in_half = warp * 16 + lane / 4;
  // Shared-memory descriptors of stage 0: this warp group's two 64-row halves of A, and
  // B. A stage is kStageBytes further on, a k32 step 32 bytes: both only move the start
  // address field (bits 0-13, in 16-byte units), which never carries into the rest.
  const uint64_t desc_a0 = smem_desc(tile_a(0) + consumer * 128 * kBlockK);
  const uint64_t desc_a1 = smem_desc(tile_a(0) + (consumer * 128 + 64) * kBlockK);
  const uint64_t desc_b = smem_desc(tile_b(0));
  constexpr uint32_t kStageDesc = kStageBytes >> 4;

  // Epilogue of one 64-row half (as in the 128x128 kernel): bf16 into two 64x64 boxes of
  // shared memory in the 128-byte swizzle by stmatrix, then one thread hands both boxes
  // to TMA, which clips rows and columns past the ends. The staging is reused once the
  // previous half's stores have read it.
  const uint32_t out_half = out_base + consumer * 2 * kOutBoxBytes;
  const int st_matrix = lane / 8;
  const int st_row = warp * 16 + (st_matrix & 1) * 8 + lane % 8;
  const uint32_t is_leader = tid == 0;
  auto store_half = [&](const float (&acc)[64], int row, int col) {
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
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.u32 p, %0, 0;\n"
        "@p cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%1, {%3, %5}], [%2];\n"
        "@p cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%1, {%4, %5}], [%6];\n"
        "@p cp.async.bulk.commit_group;\n}" ::"r"(is_leader),
        "l"(reinterpret_cast<uint64_t>(&map_d)), "r"(out_half), "r"(col), "r"(col + 64), "r"(row),
        "r"(out_half + kOutBoxBytes)
        : "memory");
  };

  // The two warp groups take turns issuing their MMAs, one 64-row half at a time
  // (named barriers 3 and 4: a warp group's turn, passed on by the other), so that the
  // tensor cores run one warp group's batch while the other promotes. Without the turns
  // both issue at once, their batches finish together and both promote while the tensor
  // cores idle. Warp group 0 starts; each passes the turn after every issue, except for
  // warp group 1's last (nobody waits for it).
  auto wait_turn = [&]() { asm volatile("bar.sync %0, 256;" ::"r"(3 + consumer) : "memory"); };
  auto pass_turn = [&]() { asm volatile("bar.arrive %0, 256;" ::"r"(4 - consumer) : "memory"); };
  if (consumer == 1) pass_turn();

  float acc0[64], acc1[64], t[64];
  int stage = 0;
  uint32_t phase = 0;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const bool last_tile = tile + static_cast<int>(gridDim.x) >= tiles;
    const TileCoord c = tile_coord(tile, tiles_m, tiles_n);
    // Scale pointers of the thread's four rows (rows past M compute on TMA's zero fill;
    // their scales are read from the last row) and of the tile's columns.
    const int r0 = c.m0 + consumer * 128 + row_in_half;
    const float* pa[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = min(r0 + (j / 2) * 64 + (j % 2) * 8, p.m - 1);
      pa[j] = p.sfa + static_cast<int64_t>(r) * p.sfa_stride_m;
    }
    const float* pb = p.sfb + static_cast<int64_t>(c.n0 / 128) * p.sfb_stride_n;
    float sa[4], sb;
#pragma unroll
    for (int j = 0; j < 4; ++j) sa[j] = __ldg(pa[j]);
    sb = __ldg(pb);
#pragma unroll
    for (int i = 0; i < 64; ++i) {
      acc0[i] = 0.0f;
      acc1[i] = 0.0f;
    }
    for (int kb = 0; kb < kblocks; ++kb) {
      // The next block's scales, loaded while this block's MMAs run.
      float na[4], nb = 0.0f;
      const int kn = kb + 1 < kblocks ? kb + 1 : kb;
#pragma unroll
      for (int j = 0; j < 4; ++j) na[j] = __ldg(pa[j] + kn * p.sfa_stride_k);
      nb = __ldg(pb + kn * p.sfb_stride_k);

      mbar_wait(full_bar(stage), phase);
      const uint32_t off = stage * kStageDesc;
      wait_turn();
      issue_block(t, desc_a0 + off, desc_b + off);
      pass_turn();
      cute::warpgroup_wait<0>();
      fence_regs(t);
      promote(acc0, t, sa[0] * sb, sa[1] * sb);
      wait_turn();
      issue_block(t, desc_a1 + off, desc_b + off);
      if (consumer == 0 || !last_tile || kb + 1 < kblocks) pass_turn();
      cute::warpgroup_wait<0>();
      fence_regs(t);
      // Both halves' MMAs have read the stage: hand it back, one arrival per warp.
      __syncwarp();
      if (lane == 0) mbar_arrive(empty_bar(stage));
      promote(acc1, t, sa[2] * sb, sa[3] * sb);
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1;
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) sa[j] = na[j];
      sb = nb;
    }
    const int row = c.m0 + consumer * 128;
    store_half(acc0, row, c.n0);
    store_half(acc1, row + 64, c.n0);
  }
  // Shared memory must outlive the last store's reads.
  if (tid == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

Status launch(const GemmArgs& g, cudaStream_t stream, const char** why) {
  if (!sm90::tma_operands_ok(g, why)) return Status::kUnsupported;
  if (g.a_mn_major || g.b_kperm16) {
    if (why) *why = "this kernel reads A K-major and B in plain K order";
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
  static uint64_t smem_reserved = 0;
  if (!reserve_smem_once(gemm_kernel, g.device, kSmemBytes, &smem_reserved)) {
    if (why) *why = "cannot reserve the kernel's shared memory";
    return Status::kLaunchFailed;
  }
  const ProblemParams p = problem_params(g);
  const int tiles = (g.m + kBlockM - 1) / kBlockM * ((g.n + kBlockN - 1) / kBlockN);
  const int sms = g.sm_count > 0 ? g.sm_count : 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(tiles < sms ? tiles : sms));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmemBytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  int nattr = 0;
  if (g.pdl) {
    attr[nattr].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[nattr].val.programmaticStreamSerializationAllowed = 1;
    ++nattr;
  }
  cfg.attrs = attr;
  cfg.numAttrs = nattr;
  if (cudaLaunchKernelEx(&cfg, gemm_kernel, map_a, map_b, map_d, p) != cudaSuccess) {
    if (why) *why = cudaGetErrorString(cudaGetLastError());
    return Status::kLaunchFailed;
  }
  return Status::kOk;
}

}  // namespace
}  // namespace kfgemm::wide

namespace kfgemm::variants {

size_t fp8_wide_256x128_workspace(const GemmArgs&) { return 0; }

Status fp8_wide_256x128_run(const GemmArgs& g, void*, cudaStream_t stream, const char** why) {
  return wide::launch(g, stream, why);
}

}  // namespace kfgemm::variants
