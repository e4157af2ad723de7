// FP8 block-scaled GEMM for few-row problems (M up to a few hundred), where the time is
// the time to stream B from memory:
//
//   D[m, n] = sum_k A[m, k] B[n, k] sfa[m, k/128] sfb[n/128, k/128]
//
// With 64 or 128 rows there are too few output tiles to keep every SM loading (64x7168
// has 56 tiles of 64x128 on 132 SMs), so K is split as well. Split-K usually writes
// FP32 partial tiles to global memory and sums them in a second kernel (variants 5, 6,
// 8). Here the CTAs that share an output tile form a thread-block cluster, one K range
// each, and sum their partial tiles through distributed shared memory: no workspace,
// no second launch, and a fixed summation order (deterministic).
//
// Layout of the work:
//  - one CTA per (output tile, K range), a cluster of `splits` CTAs per output tile
//    (1, 2, 4 or 8), two CTAs per SM (about 97 KB of shared memory each);
//  - tiles of 64x128 (one consumer warp group, wgmma m64n128k32) or 128x64 (two warp
//    groups, m64n64k32), so that a thread's accumulator and temporary stay at 64 + 64 or
//    32 + 32 registers;
//  - one producer warp issues TMA loads of A and B per 128-deep K block into a ring of
//    four stages (128-byte swizzle);
//  - consumers: the MMAs of a block into a temporary, the block scales (read from global
//    memory one block ahead, any layout) folded into the FP32 accumulator after them;
//  - epilogue: every CTA writes its partial tile to its shared memory; after a cluster
//    barrier, CTA r sums rows r, r + splits, ... over the cluster's CTAs (in rank order)
//    and stores them as bf16; a second cluster barrier keeps shared memory alive until
//    every peer has read it.
//
// Operands as in GemmArgs: A (m, k) and B (n, k) K-major with 16-byte aligned row
// pitches, k padded to a multiple of 16 with zeros, n a multiple of 8. TMA fills rows and
// columns past the ends with zeros.
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "cute/arch/mma_sm90_gmma.hpp"
#include "gemm_api.h"
#include "sm90_ptx.cuh"

namespace kfgemm::cluster_splitk {
namespace {

using namespace kfgemm::sm90;

constexpr int kBlockK = 128;  // bytes of K per stage row = one scale block
constexpr int kStages = 4;
constexpr int kMaxSplits = 8;  // portable cluster size

template <int kGroups>  // consumer warp groups: 1 -> 64x128 tiles, 2 -> 128x64 tiles
struct Config {
  static constexpr int kBlockM = 64 * kGroups;
  static constexpr int kBlockN = kGroups == 1 ? 128 : 64;
  static constexpr int kConsumers = 128 * kGroups;
  static constexpr int kThreads = kConsumers + 32;  // + the producer warp
  static constexpr int kAcc = kBlockN / 2;          // accumulator floats per thread
  static constexpr uint32_t kTileA = kBlockM * kBlockK;
  static constexpr uint32_t kTileB = kBlockN * kBlockK;
  static constexpr uint32_t kStageBytes = kTileA + kTileB;
  // Partial tile for the cluster reduction (FP32, rows padded by 4 floats so that the
  // accumulator's pairs of columns spread over the banks), in the stages' memory once
  // the K loop is done.
  static constexpr int kRedPitch = kBlockN + 4;
  static constexpr uint32_t kRedBytes = kBlockM * kRedPitch * 4;
  static constexpr uint32_t kTilesBytes =
      kStages * kStageBytes > kRedBytes ? kStages * kStageBytes : kRedBytes;
  static constexpr size_t kSmemBytes = kTilesBytes + 2 * kStages * sizeof(uint64_t) + 1024;
  static_assert(2 * (kSmemBytes + 1024) <= 228 * 1024, "two CTAs per SM");
  static_assert(kStageBytes % 1024 == 0 && kTileA % 1024 == 0, "1024-byte aligned tiles");
  using Mma = std::conditional_t<kGroups == 1, cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_SS_TN<>,
                                 cute::SM90::GMMA::MMA_64x64x32_F32E4M3E4M3_SS_TN<>>;
};

struct Params : ProblemParams {
  __nv_bfloat16* d;  // output, row pitch ldd
  int64_t ldd;
};

// Four floats at the same shared-memory offset `addr` of CTA `rank` in the cluster.
__device__ __forceinline__ float4 load_peer(uint32_t addr, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(remote)
               : "memory");
  return v;
}

template <int kGroups>
__global__ void __launch_bounds__(Config<kGroups>::kThreads, 2)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const Params p) {
  using C = Config<kGroups>;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023) & ~1023u;
  const uint32_t bars = base + C::kTilesBytes;
  auto full_bar = [&](int s) { return bars + 8 * s; };
  auto empty_bar = [&](int s) { return bars + 8 * (kStages + s); };
  auto tile_a = [&](int s) { return base + s * C::kStageBytes; };
  auto tile_b = [&](int s) { return base + s * C::kStageBytes + C::kTileA; };

  const int splits = static_cast<int>(cluster_size());
  const int rank = static_cast<int>(cluster_rank());
  const int n0 = static_cast<int>(blockIdx.x) / splits * C::kBlockN;
  const int m0 = static_cast<int>(blockIdx.y) * C::kBlockM;
  const int kblocks = (p.k + kBlockK - 1) / kBlockK;
  const int kb_begin = rank * kblocks / splits;
  const int nblocks = (rank + 1) * kblocks / splits - kb_begin;
  // Warp-uniform for the compiler (descriptor arithmetic in uniform registers).
  const int warp_group = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);

  init_stage_ring(bars, kStages, C::kConsumers / 32, &map_a, &map_b);  // per consumer warp
  __syncthreads();
  wait_prior_grid();  // launched as a dependent of the operand preparation

  float acc[C::kAcc];
#pragma unroll
  for (int i = 0; i < C::kAcc; ++i) acc[i] = 0.0f;
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32, lane = tid % 32;
  const int row = warp_group * 64 + warp * 16 + lane / 4;  // in the tile; also row + 8

  if (warp_group == kGroups) {
    // Producer warp: one thread issues the loads of the CTA's K range as stages free up.
    if (lane == 0) {
      for (int i = 0; i < nblocks; ++i) {
        const int s = i % kStages;
        mbar_wait(empty_bar(s), ((i / kStages) & 1) ^ 1);
        mbar_arrive_expect_tx(full_bar(s), C::kStageBytes);
        const int kc = (kb_begin + i) * kBlockK;
        tma_load_2d(tile_a(s), &map_a, full_bar(s), kc, m0);
        tma_load_2d(tile_b(s), &map_b, full_bar(s), kc, n0);
      }
    }
    __syncwarp();
  } else {
    const uint64_t desc_a0 = smem_desc(tile_a(0) + warp_group * 64 * kBlockK);
    const uint64_t desc_b0 = smem_desc(tile_b(0));
    constexpr uint32_t kStageDesc = C::kStageBytes >> 4;
    // Rows past M compute on TMA's zero fill; their scales are read from the last row.
    const float* pa_lo = p.sfa + static_cast<int64_t>(min(m0 + row, p.m - 1)) * p.sfa_stride_m +
                         static_cast<int64_t>(kb_begin) * p.sfa_stride_k;
    const float* pa_hi = p.sfa + static_cast<int64_t>(min(m0 + row + 8, p.m - 1)) * p.sfa_stride_m +
                         static_cast<int64_t>(kb_begin) * p.sfa_stride_k;
    const float* pb = p.sfb + static_cast<int64_t>(n0 / 128) * p.sfb_stride_n +
                      static_cast<int64_t>(kb_begin) * p.sfb_stride_k;
    float sa_lo = 0.0f, sa_hi = 0.0f, sb = 0.0f;
    if (nblocks > 0) {
      sa_lo = __ldg(pa_lo);
      sa_hi = __ldg(pa_hi);
      sb = __ldg(pb);
    }
    float t[C::kAcc];
    for (int i = 0; i < nblocks; ++i) {
      const int s = i % kStages;
      mbar_wait(full_bar(s), (i / kStages) & 1);
      fence_regs(t);
      cute::warpgroup_arrive();
#pragma unroll
      for (int kk = 0; kk < kBlockK / 32; ++kk) {
        mma<typename C::Mma>(desc_a0 + s * kStageDesc + 2 * kk, desc_b0 + s * kStageDesc + 2 * kk, t,
                             kk > 0);
      }
      cute::warpgroup_commit_batch();
      // The next block's scales load while the MMAs run.
      float na_lo = 0.0f, na_hi = 0.0f, nb = 0.0f;
      if (i + 1 < nblocks) {
        pa_lo += p.sfa_stride_k;
        pa_hi += p.sfa_stride_k;
        pb += p.sfb_stride_k;
        na_lo = __ldg(pa_lo);
        na_hi = __ldg(pa_hi);
        nb = __ldg(pb);
      }
      cute::warpgroup_wait<0>();
      fence_regs(t);
      __syncwarp();
      if (lane == 0) mbar_arrive(empty_bar(s));
      const float s_lo = sa_lo * sb, s_hi = sa_hi * sb;
      // Accumulator element i sits in row +0 (i % 4 < 2) or +8 of the thread's rows.
#pragma unroll
      for (int j = 0; j < C::kAcc; ++j) acc[j] = fmaf(t[j], (j % 4 < 2) ? s_lo : s_hi, acc[j]);
      sa_lo = na_lo;
      sa_hi = na_hi;
      sb = nb;
    }
    // Both consumer warp groups are past their last MMAs before the stages' memory is
    // reused for the partial tile.
    if (kGroups > 1) named_barrier(1, C::kConsumers);
    float* red = reinterpret_cast<float*>(smem_raw + (base - smem_u32(smem_raw)));
#pragma unroll
    for (int j = 0; j < C::kAcc / 4; ++j) {  // column group j: 8 columns
      const int col = 8 * j + 2 * (lane % 4);
      *reinterpret_cast<float2*>(&red[row * C::kRedPitch + col]) = make_float2(acc[4 * j], acc[4 * j + 1]);
      *reinterpret_cast<float2*>(&red[(row + 8) * C::kRedPitch + col]) =
          make_float2(acc[4 * j + 2], acc[4 * j + 3]);
    }
  }
  cluster_sync();  // every CTA's partial tile is written

  if (warp_group < kGroups) {
    // This CTA's share of the tile: rows rank, rank + splits, ...; four columns per
    // thread and step, summed over the cluster in rank order.
    constexpr int kQuads = C::kBlockN / 4;
    const int rows = C::kBlockM / splits;
    for (int idx = threadIdx.x; idx < rows * kQuads; idx += C::kConsumers) {
      const int r = rank + (idx / kQuads) * splits;
      const int c = (idx % kQuads) * 4;
      const uint32_t addr = base + static_cast<uint32_t>(r * C::kRedPitch + c) * 4;
      float4 v = load_peer(addr, 0);
      for (int q = 1; q < splits; ++q) {
        const float4 w = load_peer(addr, q);
        v.x += w.x;
        v.y += w.y;
        v.z += w.z;
        v.w += w.w;
      }
      const int gm = m0 + r, gn = n0 + c;
      if (gm < p.m && gn < p.n) {  // n is a multiple of 8: four columns in or out together
        const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y);
        const __nv_bfloat162 hi = __floats2bfloat162_rn(v.z, v.w);
        uint2 packed;
        packed.x = *reinterpret_cast<const uint32_t*>(&lo);
        packed.y = *reinterpret_cast<const uint32_t*>(&hi);
        *reinterpret_cast<uint2*>(p.d + static_cast<int64_t>(gm) * p.ldd + gn) = packed;
      }
    }
  }
  cluster_sync();  // no CTA leaves while a peer may still read its shared memory
}

template <int kGroups>
Status launch(const GemmArgs& g, int splits, cudaStream_t stream, const char** why) {
  using C = Config<kGroups>;
  CUtensorMap map_a, map_b;
  const auto u8 = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  if (!make_map(&map_a, u8, 1, g.a, g.m, g.k, g.lda, C::kBlockM, kBlockK) ||
      !make_map(&map_b, u8, 1, g.b, g.n, g.k, g.ldb, C::kBlockN, kBlockK)) {
    if (why) *why = "cuTensorMapEncodeTiled failed for an operand";
    return Status::kLaunchFailed;
  }
  static uint64_t smem_reserved = 0;
  if (!reserve_smem_once(gemm_kernel<kGroups>, g.device, C::kSmemBytes, &smem_reserved)) {
    if (why) *why = "cannot reserve the kernel's shared memory";
    return Status::kLaunchFailed;
  }
  const Params p{problem_params(g), static_cast<__nv_bfloat16*>(g.d), g.ldd};
  const int tiles_n = (g.n + C::kBlockN - 1) / C::kBlockN;
  const int tiles_m = (g.m + C::kBlockM - 1) / C::kBlockM;
  if (static_cast<int64_t>(tiles_n) * splits > INT32_MAX || tiles_m > 65535) {
    if (why) *why = "too many tiles for the grid";
    return Status::kUnsupported;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(tiles_n * splits), static_cast<unsigned>(tiles_m));
  cfg.blockDim = dim3(C::kThreads);
  cfg.dynamicSmemBytes = C::kSmemBytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  int n = 0;
  attr[n].id = cudaLaunchAttributeClusterDimension;
  attr[n].val.clusterDim.x = static_cast<unsigned>(splits);
  attr[n].val.clusterDim.y = 1;
  attr[n].val.clusterDim.z = 1;
  ++n;
  if (g.pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  if (cudaLaunchKernelEx(&cfg, gemm_kernel<kGroups>, map_a, map_b, p) != cudaSuccess) {
    if (why) *why = cudaGetErrorString(cudaGetLastError());
    return Status::kLaunchFailed;
  }
  return Status::kOk;
}

}  // namespace

// K slices per output tile when the caller leaves it open: the most whose CTAs still fit
// one per SM, up to 8 for 64-row tiles and 4 for 128-row ones, each slice keeping at
// least four K blocks. Two CTAs per SM fit, but the second one's slices share the SM's
// load path and lose (H100, interleaved, us, K = 7168: 64x2112 (17 tiles) 16.6 with 4
// slices vs 17.3 with 8, 64x3072 19.7 vs 21.1; 128x4096 (64 tiles of 128x64) 25.3 with 2
// vs 29.4 with 4), while below one CTA per SM more slices pay: 64x1024 13.1 with 8 vs
// 14.6 with 4, 64x2048x16384 25.8 vs 27.2; with 128-row tiles 4 stay ahead of 8 even
// there: 128x1024 13.9 vs 14.8; NOTES.md, v32).
int default_splits(int m, int n, int k, int sm_count) {
  const int64_t tiles = m <= 64 ? (n + 127) / 128 : static_cast<int64_t>((m + 127) / 128) * ((n + 63) / 64);
  const int kblocks = (k + kBlockK - 1) / kBlockK;
  const int most = m <= 64 ? kMaxSplits : kMaxSplits / 2;
  int s = 1;
  while (s < most && 8 * s <= kblocks && tiles * 2 * s <= sm_count) s *= 2;
  return s;
}

}  // namespace kfgemm::cluster_splitk

namespace kfgemm::variants {

size_t fp8_cluster_splitk_workspace(const GemmArgs&) { return 0; }

Status fp8_cluster_splitk_run(const GemmArgs& g, void*, cudaStream_t stream, const char** why) {
  using namespace kfgemm::cluster_splitk;
  if (!sm90::tma_operands_ok(g, why)) return Status::kUnsupported;
  const int splits = g.splits > 0 ? g.splits : default_splits(g.m, g.n, g.k, g.sm_count);
  if (splits != 1 && splits != 2 && splits != 4 && splits != 8) {
    if (why) *why = "splits (the cluster size) must be 1, 2, 4 or 8";
    return Status::kUnsupported;
  }
  return g.m <= 64 ? launch<1>(g, splits, stream, why) : launch<2>(g, splits, stream, why);
}

}  // namespace kfgemm::variants
