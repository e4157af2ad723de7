// Hopper building blocks of the hand-written kernels: mbarriers, TMA, wgmma shared-memory
// descriptors (device side), and TMA descriptor encoding (host side). Everything is
// inline: the header is included by several translation units.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <utility>

#include "driver_entry.h"  // first: it adjusts how CUTLASS headers reach the driver
#include "cute/arch/mma_sm90_gmma.hpp"
#include "gemm_api.h"
#include "smem_reserve.h"

namespace kfgemm::sm90 {

// ---- device side ----------------------------------------------------------------------

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

// Barrier initialisation made visible to the async proxy (TMA) and, in a cluster, to
// the peer CTAs.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// By thread 0 (the caller synchronizes after it): the stage ring's mbarriers at `bars`,
// `stages` full barriers (one arrival, the TMA issue, plus its transaction bytes) followed
// by `stages` empty ones (`empty_arrivals` each), made visible to the async proxy; and the
// operands' tensor maps prefetched.
__device__ __forceinline__ void init_stage_ring(uint32_t bars, int stages, uint32_t empty_arrivals,
                                                const CUtensorMap* map_a, const CUtensorMap* map_b) {
  if (threadIdx.x != 0) return;
  for (int s = 0; s < stages; ++s) {
    mbar_init(bars + 8 * s, 1);
    mbar_init(bars + 8 * (stages + s), empty_arrivals);
  }
  mbar_init_fence();
  prefetch_tensormap(map_a);
  prefetch_tensormap(map_b);
}

// The 2-D box at (c0 = column, c1 = row) of `map` into shared memory at `dst`,
// completing its bytes on the mbarrier `bar`.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// An L2 policy that makes the lines a load brings in the first to be evicted: for data
// read once (a few-row problem's B), so that it replaces itself rather than lines other
// kernels left in the L2 (dirty ones cost a write-back each).
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// tma_load_2d with an L2 cache policy (l2_evict_first_policy).
__device__ __forceinline__ void tma_load_2d_hint(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                                 int c0, int c1, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "l"(policy)
      : "memory");
}

__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Counts the calling threads in on named barrier `id` of `threads` without waiting (the
// others wait on it with named_barrier).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

__device__ __forceinline__ uint32_t cluster_size() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}

// Every thread of every CTA in the cluster; orders the writes before it (release) with
// the reads after it (acquire), the peers' shared memory included.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// Launched as a programmatic dependent of the previous kernel on the stream: nothing
// after this may read that kernel's output before it has completed (a no-op otherwise).
__device__ __forceinline__ void wait_prior_grid() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

// wgmma shared-memory descriptor of a K-major tile written by TMA with the 128-byte
// swizzle: rows of 128 bytes, 8-row atoms 1024 bytes apart. Stepping K by 32 bytes
// inside the atom is an offset of the start address (2 in units of 16 bytes).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
  uint64_t desc = (addr & 0x3FFFF) >> 4;
  desc |= uint64_t(1) << 16;          // leading byte offset (unused with swizzling)
  desc |= uint64_t(1024 >> 4) << 32;  // stride byte offset: next 8-row atom
  desc |= uint64_t(1) << 62;          // 128-byte swizzle
  return desc;
}

// The same for a 16-bit operand stored MN-major in the 128-byte swizzle: rows of K, each
// 64 elements of M or N (128 bytes), 8-row atoms of 1024 bytes one after the other along
// K; the next 64 elements of M or N start `mn_stride` bytes further on.
__device__ __forceinline__ uint64_t smem_desc_mn(uint32_t addr, uint32_t mn_stride) {
  uint64_t desc = (addr & 0x3FFFF) >> 4;
  desc |= uint64_t(mn_stride >> 4) << 16;  // leading byte offset: the next 64 of M or N
  desc |= uint64_t(1024 >> 4) << 32;       // stride byte offset: the next 8 rows of K
  desc |= uint64_t(1) << 62;               // 128-byte swizzle
  return desc;
}

// One wgmma of `Mma` (an SS atom of CuTe's SM90 GMMA) on descriptors da and db into the
// N-float accumulator d; accumulate = false overwrites d.
template <typename Mma, int N, size_t... I>
__device__ __forceinline__ void mma_impl(uint64_t da, uint64_t db, float (&d)[N], bool accumulate,
                                         std::index_sequence<I...>) {
  Mma::fma(da, db, d[I]..., accumulate ? cute::SM90::GMMA::ScaleOut::One : cute::SM90::GMMA::ScaleOut::Zero);
}

template <typename Mma, int N>
__device__ __forceinline__ void mma(uint64_t da, uint64_t db, float (&d)[N], bool accumulate) {
  mma_impl<Mma>(da, db, d, accumulate, std::make_index_sequence<N>{});
}

// One wgmma of `Mma` (an RS atom: A from the thread's four fragment words a0..a3, B on
// descriptor db) into the N-float accumulator d.
template <typename Mma, int N, size_t... I>
__device__ __forceinline__ void mma_rs_impl(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint64_t db, float (&d)[N], bool accumulate,
                                            std::index_sequence<I...>) {
  Mma::fma(a0, a1, a2, a3, db, d[I]...,
           accumulate ? cute::SM90::GMMA::ScaleOut::One : cute::SM90::GMMA::ScaleOut::Zero);
}

template <typename Mma, int N>
__device__ __forceinline__ void mma_rs(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                       uint64_t db, float (&d)[N], bool accumulate) {
  mma_rs_impl<Mma>(a0, a1, a2, a3, db, d, accumulate, std::make_index_sequence<N>{});
}

// Keeps the compiler from moving accesses to an accumulator across the wgmma fences.
template <int N>
__device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// The problem's sizes and block scales as the hand-written kernels take them (GemmArgs'
// fields, without the operands, which travel as tensor maps).
struct ProblemParams {
  int m, n, k;
  const float* sfa;
  int64_t sfa_stride_m, sfa_stride_k;
  const float* sfb;
  int64_t sfb_stride_n, sfb_stride_k;
};

// ---- host side ------------------------------------------------------------------------

inline ProblemParams problem_params(const GemmArgs& g) {
  return {g.m, g.n, g.k, g.sfa, g.sfa_stride_m, g.sfa_stride_k, g.sfb, g.sfb_stride_n, g.sfb_stride_k};
}

// What the TMA-based kernels need of a problem: 16-byte aligned K-major operands and
// output, K padded to a multiple of 16, N a multiple of 8.
inline bool tma_operands_ok(const GemmArgs& g, const char** why) {
  if (g.m < 1 || g.n < 1 || g.k < 1 || g.k % 16 != 0 || g.n % 8 != 0 || g.lda % 16 != 0 ||
      g.ldb % 16 != 0 || g.ldd % 8 != 0 || reinterpret_cast<uintptr_t>(g.a) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(g.b) % 16 != 0 || reinterpret_cast<uintptr_t>(g.d) % 16 != 0) {
    if (why) *why = "the kernel needs 16-byte aligned K-major operands and output, N a multiple of 8";
    return false;
  }
  return true;
}

// A (rows, cols) row-major matrix with a pitch of `ld` elements, moved in boxes of
// box_rows x box_cols with the 128-byte swizzle (box_cols * element size = 128). TMA
// fills the parts of a box past the matrix's ends with zeros.
inline bool make_map(CUtensorMap* map, CUtensorMapDataType type, int elem_bytes, const void* base,
                     int64_t rows, int64_t cols, int64_t ld, uint32_t box_rows, uint32_t box_cols) {
  const driver::EncodeTiled encode = driver::encode_tiled();
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

}  // namespace kfgemm::sm90
