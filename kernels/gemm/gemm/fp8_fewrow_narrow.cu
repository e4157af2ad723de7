// FP8 block-scaled GEMM for few-row problems with narrow output tiles over all of K:
//
//   D[m, n] = sum_k A[m, k] B[n, k] sfa[m, k/128] sfb[n/128, k/128]
//
// With 64 or 128 rows the time is the time to read B. The op's kernels for those shapes
// either leave SMs idle (64x7168x2048: 56 column tiles of 128 on 132 SMs) or split K and
// sum FP32 slices in a second kernel (64x2112x7168: 4 slices), and NOTES.md (v18) put
// the second kernel at 2.4 us of a 12-15 us call. Here every SM gets one tile of the
// full K, so that nothing is summed afterwards: the column tiles are as narrow as it
// takes to give each SM one (16, 32, 56 or 64 columns: 2112 / 16 = 132, 4096 / 32 =
// 128, 7168 / 56 = 128). The price is A: every tile reads all of its rows of A, so A
// moves from L2 once per tile instead of once per 128 columns. CTAs on neighbouring
// column tiles of the same rows form a cluster of 1, 2 or 4 and load A once for all of
// them: each loads a 1/c share of A's rows and multicasts it to the others.
//
//  - one CTA per tile and SM (persistent over tiles when there are more than fit), a ring
//    of stages of A (64 or 128 rows) and B (the tile's columns) of about 200 KB;
//  - one consumer warp group per 64 rows, wgmma m64nNk32 over the whole tile width, two
//    temporaries: block k's MMAs run while block k-1 is promoted into the accumulator;
//  - B scales per 8 columns: a tile of at most 128 columns spans at most two 128-column
//    scale blocks;
//  - a stage is released to every CTA of the cluster (its producer multicasts into all of
//    them); each producer drains its empty barriers before the CTA exits, so that no peer
//    arrives on a CTA that has left;
//  - the epilogue stores bf16 pairs straight into the output.
//
// Operands as in GemmArgs: A (m, k) and B (n, k) K-major with 16-byte aligned row
// pitches, k padded to a multiple of 16 with zeros, n a multiple of 8. TMA fills rows and
// columns past the ends with zeros.
#include <cuda_bf16.h>

#include <cstdint>

#include "cute/arch/mma_sm90_gmma.hpp"
#include "cute/arch/mma_sm90_gmma_ext.hpp"
#include "gemm_api.h"
#include "sm90_ptx.cuh"

namespace kfgemm::narrow {
namespace {

using namespace kfgemm::sm90;

constexpr int kBlockK = 128;  // bytes of K per stage row = one scale block
constexpr size_t kRingBytes = 200 * 1024;
constexpr int kMaxStages = 24;
constexpr int kWidths[] = {16, 32, 56, 64};  // tile columns, narrowest first

template <int kN>
struct MmaOf;
template <>
struct MmaOf<16> {
  using type = cute::SM90::GMMA::MMA_64x16x32_F32E4M3E4M3_SS_TN<>;
};
template <>
struct MmaOf<32> {
  using type = cute::SM90::GMMA::MMA_64x32x32_F32E4M3E4M3_SS_TN<>;
};
template <>
struct MmaOf<56> {
  using type = cute::SM90::GMMA::MMA_64x56x32_F32E4M3E4M3_SS_TN<>;
};
template <>
struct MmaOf<64> {
  using type = cute::SM90::GMMA::MMA_64x64x32_F32E4M3E4M3_SS_TN<>;
};

// Tiles of 64 * kGroups rows (one consumer warp group per 64) and kN columns.
template <int kGroups, int kN>
struct Config {
  static constexpr int kBlockM = 64 * kGroups;
  static constexpr int kConsumers = 128 * kGroups;
  static constexpr int kThreads = kConsumers + 32;  // + the producer warp
  static constexpr int kAcc = kN / 2;               // accumulator floats per thread
  // Blocks in flight per consumer warp group, each in a temporary of its own.
  static constexpr int kDepth = kAcc <= 8 ? 8 : kAcc <= 16 ? 6 : kAcc <= 28 ? 4 : 3;
  static constexpr uint32_t kTileA = kBlockM * kBlockK;
  static constexpr uint32_t kTileB = kN * kBlockK;
  static constexpr uint32_t kStageBytes = kTileA + kTileB;
  static constexpr int kStages = static_cast<int>(kRingBytes / kStageBytes) < kMaxStages
                                     ? static_cast<int>(kRingBytes / kStageBytes)
                                     : kMaxStages;
  static constexpr size_t kSmemBytes = kStages * kStageBytes + 2 * kStages * sizeof(uint64_t) + 1024;
  static_assert(kN % 8 == 0 && kN <= 128, "tile widths are multiples of 8 up to 128");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one SM");
  static_assert(kTileA % 1024 == 0 && kTileB % 1024 == 0, "1024-byte aligned tiles");
};

struct Params : ProblemParams {
  __nv_bfloat16* d;  // output, row pitch ldd
  int64_t ldd;
};

// Arrival on the mbarrier at shared-memory offset `bar` of CTA `rank` in the cluster
// (CTA-scope release: it orders this warp's completed wgmma reads of the stage).
__device__ __forceinline__ void arrive_remote(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}" ::"r"(bar),
      "r"(rank)
      : "memory");
}

__device__ __forceinline__ void tma_load_2d_mc(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                               int c0, int c1, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
}

template <int kGroups, int kN>
__global__ void __launch_bounds__(Config<kGroups, kN>::kThreads, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const Params p) {
  using C = Config<kGroups, kN>;
  using Mma = typename MmaOf<kN>::type;
  constexpr int kStages = C::kStages;
  constexpr int kAcc = C::kAcc;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023) & ~1023u;
  const uint32_t bars = base + kStages * C::kStageBytes;
  auto full_bar = [&](int s) { return bars + 8 * s; };
  auto empty_bar = [&](int s) { return bars + 8 * (kStages + s); };
  auto tile_a = [&](int s) { return base + s * C::kStageBytes; };
  auto tile_b = [&](int s) { return base + s * C::kStageBytes + C::kTileA; };

  const int csize = static_cast<int>(cluster_size());
  const int rank = csize > 1 ? static_cast<int>(cluster_rank()) : 0;
  const int tiles_m = (p.m + C::kBlockM - 1) / C::kBlockM;
  const int tiles_n = (p.n + kN - 1) / kN;
  const int groups_n = (tiles_n + csize - 1) / csize;  // column tiles in clusters of csize
  const int units = tiles_m * groups_n;                // one per cluster
  const int kblocks = (p.k + kBlockK - 1) / kBlockK;
  const int cluster_id = static_cast<int>(blockIdx.x) / csize;
  const int clusters = static_cast<int>(gridDim.x) / csize;
  // Warp-uniform for the compiler (descriptor arithmetic in uniform registers).
  const int warp_group = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);

  // Every consumer warp of the cluster releases each stage of every CTA in it.
  init_stage_ring(bars, kStages, (C::kConsumers / 32) * csize, &map_a, &map_b);
  __syncthreads();
  if (csize > 1) cluster_sync();  // the peers' barriers exist before anything reaches them
  wait_prior_grid();              // launched as a dependent of the operand preparation

  // Cluster unit u: rows tm (slowest), column tiles [cn * csize, cn * csize + csize); this
  // CTA's column tile is cn * csize + rank (past N it loads zeros and stores nothing, but
  // still loads its share of A for the others).
  auto tile_of = [&](int u, int* m0, int* n0) {
    const int tm = u / groups_n;
    *m0 = tm * C::kBlockM;
    *n0 = ((u - tm * groups_n) * csize + rank) * kN;
  };

  if (warp_group == kGroups) {
    // Producer warp: one thread issues the TMA loads: its share of A's rows to every CTA
    // of the cluster, and its own B tile.
    if (threadIdx.x == C::kConsumers) {
      const uint32_t share_rows = C::kBlockM / csize;
      const uint32_t share_bytes = share_rows * kBlockK;
      const uint16_t mask = static_cast<uint16_t>((1u << csize) - 1);
      int stage = 0;
      uint32_t phase = 0;
      for (int u = cluster_id; u < units; u += clusters) {
        int m0, n0;
        tile_of(u, &m0, &n0);
        for (int kb = 0; kb < kblocks; ++kb) {
          mbar_wait(empty_bar(stage), phase ^ 1);
          mbar_arrive_expect_tx(full_bar(stage), C::kStageBytes);
          if (csize > 1) {
            tma_load_2d_mc(tile_a(stage) + rank * share_bytes, &map_a, full_bar(stage), kb * kBlockK,
                           m0 + rank * share_rows, mask);
          } else {
            tma_load_2d(tile_a(stage), &map_a, full_bar(stage), kb * kBlockK, m0);
          }
          tma_load_2d(tile_b(stage), &map_b, full_bar(stage), kb * kBlockK, n0);
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
      if (csize > 1) {
        // The peers' consumers arrive on this CTA's empty barriers: stay until every
        // stage has been released by all of them.
        for (int i = 0; i < kStages; ++i) {
          mbar_wait(empty_bar(stage), phase ^ 1);
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

  const int tid = threadIdx.x % 128;
  const int warp = tid / 32, lane = tid % 32;
  const int row = warp_group * 64 + warp * 16 + lane / 4;  // in the tile; also row + 8
  const uint64_t desc_a0 = smem_desc(tile_a(0) + warp_group * 64 * kBlockK);
  const uint64_t desc_b0 = smem_desc(tile_b(0));
  constexpr uint32_t kStageDesc = C::kStageBytes >> 4;
  constexpr int kDepth = C::kDepth;
  const int nblocks_b = (p.n - 1) / 128;  // last B scale row that exists
  int stage = 0;      // the stage of the next block to issue
  int fin_stage = 0;  // the stage of the next block to finish
  uint32_t phase = 0;
  for (int u = cluster_id; u < units; u += clusters) {
    int m0, n0;
    tile_of(u, &m0, &n0);
    float acc[kAcc];
    float tmp[kDepth][kAcc];  // the blocks in flight, slot kb % kDepth
    float sc[kDepth][4];      // their scales: row (lo, hi) times B block (first, second)
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
    // Column group j (8 columns) takes B scale block (n0 + 8j) / 128: the first jb groups
    // the tile's first block, the others the next one.
    const int jb = (128 - n0 % 128) / 8;
    const int nb_first = min(n0 / 128, nblocks_b), nb_second = min(n0 / 128 + 1, nblocks_b);
    // Block scales from global memory (any layout), loaded when the block's MMAs are
    // issued and used when they are done, kDepth - 1 blocks later. Rows past M compute on
    // TMA's zero fill; their scales are read from the last row.
    const float* pa_lo = p.sfa + static_cast<int64_t>(min(m0 + row, p.m - 1)) * p.sfa_stride_m;
    const float* pa_hi = p.sfa + static_cast<int64_t>(min(m0 + row + 8, p.m - 1)) * p.sfa_stride_m;
    const float* pb0 = p.sfb + static_cast<int64_t>(nb_first) * p.sfb_stride_n;
    const float* pb1 = p.sfb + static_cast<int64_t>(nb_second) * p.sfb_stride_n;
    // Block kb's scales into slot d and its MMAs into tmp[d] (overwritten).
    auto issue = [&](int kb, float(&tc)[kAcc], float(&s)[4]) {
      const int64_t ka = static_cast<int64_t>(kb) * p.sfa_stride_k;
      const int64_t kbb = static_cast<int64_t>(kb) * p.sfb_stride_k;
      s[0] = __ldg(pa_lo + ka);
      s[1] = __ldg(pa_hi + ka);
      s[2] = __ldg(pb0 + kbb);
      s[3] = __ldg(pb1 + kbb);
      mbar_wait(full_bar(stage), phase);
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
    // of column group j = i / 4 sits in row +0 if i % 4 < 2, else +8), its stage released
    // in every CTA of the cluster.
    auto finish = [&](const float(&tp)[kAcc], const float(&s)[4]) {
      const float lo0 = s[0] * s[2], lo1 = s[0] * s[3], hi0 = s[1] * s[2], hi1 = s[1] * s[3];
#pragma unroll
      for (int i = 0; i < kAcc; ++i) {
        const int j = i / 4;
        const float f = (i % 4 < 2) ? (j < jb ? lo0 : lo1) : (j < jb ? hi0 : hi1);
        acc[i] = fmaf(tp[i], f, acc[i]);
      }
      __syncwarp();
      if (lane < csize) {
        if (lane == rank) {
          mbar_arrive(empty_bar(fin_stage));
        } else {
          arrive_remote(empty_bar(fin_stage), static_cast<uint32_t>(lane));
        }
      }
      if (++fin_stage == kStages) fin_stage = 0;
    };
    // Blocks go in chunks of kDepth: the chunk's MMAs are issued together, each block's
    // chain of four dependent MMAs into a temporary of its own, then waited for together
    // and promoted. With one block in flight at a time the loop ran at the latency of
    // that chain (about 460 ns per block under the profiler; NOTES.md, v27). Within a
    // chunk nothing reads an accumulator in flight: keeping blocks in flight across the
    // loop's back edge made ptxas serialize every wgmma (C7514).
    int kb = 0;  // the next block
    while (kb < kblocks) {
      const int chunk = min(kDepth, kblocks - kb);
#pragma unroll
      for (int d = 0; d < kDepth; ++d) {
        if (d < chunk) issue(kb + d, tmp[d], sc[d]);
      }
      cute::warpgroup_wait<0>();
#pragma unroll
      for (int d = 0; d < kDepth; ++d) {
        if (d < chunk) {
          fence_regs(tmp[d]);
          finish(tmp[d], sc[d]);
        }
      }
      kb += chunk;
    }
    // Column group j holds columns 8j + 2 (lane % 4) + {0, 1}; n is a multiple of 8, so
    // a pair is inside or outside together.
    const int r_lo = m0 + row, r_hi = r_lo + 8;
    const int c0 = n0 + 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < kAcc / 4; ++j) {
      const int col = c0 + 8 * j;
      if (col >= p.n) continue;
      if (r_lo < p.m) {
        *reinterpret_cast<__nv_bfloat162*>(p.d + r_lo * p.ldd + col) =
            __floats2bfloat162_rn(acc[4 * j], acc[4 * j + 1]);
      }
      if (r_hi < p.m) {
        *reinterpret_cast<__nv_bfloat162*>(p.d + r_hi * p.ldd + col) =
            __floats2bfloat162_rn(acc[4 * j + 2], acc[4 * j + 3]);
      }
    }
  }
}

int groups_for(const GemmArgs& g) { return g.m <= 64 ? 1 : 2; }

// The cluster size: g.splits (1, 2 or 4) or 2.
int cluster_for(const GemmArgs& g) { return g.splits > 0 ? g.splits : 2; }

// CTAs that run at once in clusters of `csize` (asked once per device and build).
template <typename Kernel>
int resident_ctas(Kernel kernel, const GemmArgs& g, int threads, size_t smem, int csize, int* cache) {
  int n = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
  if (n > 0) return n;
  const int sms = g.sm_count > 0 ? g.sm_count : 132;
  if (csize == 1) {
    n = sms;
  } else {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(sms / csize * csize));
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = csize;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess || clusters < 1) {
      return 0;
    }
    n = clusters * csize;
  }
  __atomic_store_n(cache, n, __ATOMIC_RELEASE);
  return n;
}

template <int kGroups, int kN>
Status launch(const GemmArgs& g, int csize, cudaStream_t stream, const char** why) {
  using C = Config<kGroups, kN>;
  constexpr auto kernel = gemm_kernel<kGroups, kN>;
  CUtensorMap map_a, map_b;
  const auto u8 = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  if (!make_map(&map_a, u8, 1, g.a, g.m, g.k, g.lda, C::kBlockM / csize, kBlockK) ||
      !make_map(&map_b, u8, 1, g.b, g.n, g.k, g.ldb, kN, kBlockK)) {
    if (why) *why = "cuTensorMapEncodeTiled failed for an operand";
    return Status::kLaunchFailed;
  }
  static uint64_t smem_reserved = 0;
  if (!reserve_smem_once(kernel, g.device, C::kSmemBytes, &smem_reserved)) {
    if (why) *why = "cannot reserve the kernel's shared memory";
    return Status::kLaunchFailed;
  }
  static int resident_cache[64][3] = {};
  const int slot = csize == 1 ? 0 : csize == 2 ? 1 : 2;
  int local = 0;
  int* cache = g.device >= 0 && g.device < 64 ? &resident_cache[g.device][slot] : &local;
  const int resident = resident_ctas(kernel, g, C::kThreads, C::kSmemBytes, csize, cache);
  if (resident < csize) {
    if (why) *why = "cannot place the kernel's thread-block clusters on this GPU";
    return Status::kLaunchFailed;
  }
  const int tiles_m = (g.m + C::kBlockM - 1) / C::kBlockM;
  const int64_t units = static_cast<int64_t>(tiles_m) * ((g.n + kN * csize - 1) / (kN * csize));
  const int64_t clusters = units < resident / csize ? units : resident / csize;
  const Params p{problem_params(g), static_cast<__nv_bfloat16*>(g.d), g.ldd};
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(clusters * csize));
  cfg.blockDim = dim3(C::kThreads);
  cfg.dynamicSmemBytes = C::kSmemBytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  int nattr = 0;
  attr[nattr].id = cudaLaunchAttributeClusterDimension;
  attr[nattr].val.clusterDim.x = csize;
  attr[nattr].val.clusterDim.y = 1;
  attr[nattr].val.clusterDim.z = 1;
  ++nattr;
  if (g.pdl) {
    attr[nattr].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[nattr].val.programmaticStreamSerializationAllowed = 1;
    ++nattr;
  }
  cfg.attrs = attr;
  cfg.numAttrs = nattr;
  if (cudaLaunchKernelEx(&cfg, kernel, map_a, map_b, p) != cudaSuccess) {
    if (why) *why = cudaGetErrorString(cudaGetLastError());
    return Status::kLaunchFailed;
  }
  return Status::kOk;
}

// The narrowest width whose tiles fit on the SMs at once, else the widest (the grid then
// runs over several tiles per CTA).
int width_for(const GemmArgs& g, int csize) {
  const int sms = g.sm_count > 0 ? g.sm_count : 132;
  const int bm = 64 * groups_for(g);
  const int64_t tiles_m = (g.m + bm - 1) / bm;
  for (int w : kWidths) {
    const int64_t groups = (g.n + static_cast<int64_t>(w) * csize - 1) / (static_cast<int64_t>(w) * csize);
    if (tiles_m * groups * csize <= sms) return w;
  }
  return kWidths[sizeof(kWidths) / sizeof(kWidths[0]) - 1];
}

template <int kGroups>
Status launch_width(const GemmArgs& g, int width, int csize, cudaStream_t stream, const char** why) {
  switch (width) {
    case 16: return launch<kGroups, 16>(g, csize, stream, why);
    case 32: return launch<kGroups, 32>(g, csize, stream, why);
    case 56: return launch<kGroups, 56>(g, csize, stream, why);
    default: return launch<kGroups, 64>(g, csize, stream, why);
  }
}

Status run(const GemmArgs& g, cudaStream_t stream, const char** why) {
  if (!tma_operands_ok(g, why)) return Status::kUnsupported;
  const int csize = cluster_for(g);
  if (csize != 1 && csize != 2 && csize != 4) {
    if (why) *why = "splits is the cluster size: 1, 2 or 4 (0: 2)";
    return Status::kUnsupported;
  }
  const int width = width_for(g, csize);
  return groups_for(g) == 1 ? launch_width<1>(g, width, csize, stream, why)
                            : launch_width<2>(g, width, csize, stream, why);
}

}  // namespace
}  // namespace kfgemm::narrow

namespace kfgemm::variants {

size_t fp8_fewrow_narrow_workspace(const GemmArgs&) { return 0; }

Status fp8_fewrow_narrow_run(const GemmArgs& g, void*, cudaStream_t stream, const char** why) {
  return narrow::run(g, stream, why);
}

}  // namespace kfgemm::variants
