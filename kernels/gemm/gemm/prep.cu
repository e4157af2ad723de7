// Operand preparation: rewrite an FP8 operand of any strides into the canonical
// K-major, zero-padded buffer the GEMM mainloop reads, as e4m3fn (e4m3fnuz re-encoded)
// or converted to BF16.
//
// MN-major inputs (the challenge's storage) go through a 128x128 shared-memory
// transpose: 16-byte coalesced loads along M/N, a swizzled tile, 4x4 byte transposes
// in registers, and 16-byte coalesced stores along K. K-major and arbitrarily strided
// inputs are copied row by row, 16 elements per vector.
//
// Block scales that the GEMM wants row-major can be copied in the same launch.
//
// Both operands go in one persistent launch: a grid sized to the blocks the device holds
// at once walks the items of both jobs; each block streams its tiles through a ring of
// four shared-memory tiles filled by cp.async, so the reads of the next three tiles are in
// flight while the current one is transposed and stored.
#include <cuda_runtime.h>
#include <stdint.h>

#include <algorithm>
#include <atomic>

#include "fp8_convert.cuh"
#include "gemm_api.h"

namespace kfgemm {
namespace {

constexpr int kThreads = 256;
constexpr int kTile = 128;  // rows x k of one transpose tile

enum class Mode : int { kTranspose = 0, kRowCopy = 1 };

struct PrepJob {
  const uint8_t* src;
  int64_t rows, rows_out, k, stride_row, stride_k;
  void* dst;
  int64_t ld;
  Mode mode;
  bool vec;          // 16-byte loads are aligned along the contiguous dimension
  bool kperm16;      // each 16 of K in the MN-major-A kernels' order (OperandPrep)
  int64_t tiles_r;   // transpose: tiles along rows
  int64_t blocks;    // blocks this job owns
};

struct PrepParams {
  PrepJob job[2];
  int count;
  ScaleCopy scale[2];
  int scale_split;  // elements of scale[0]: where scale[1]'s begin in the index space
  int scale_total;  // elements of both (0: no scales to copy)
};

// Scale matrices copied to row-major. The elements of both form one index space over
// the destinations, in row-major order so that the writes are coalesced. Blocks copy
// them after their last tile, the last blocks first: those have one tile fewer whenever
// the tiles do not divide evenly among the blocks. The copy still lengthens the launch
// by 2-3.5 us on H200 (6144x3072x1536, 6144x7168x2048; loading the scales before the
// first tile and storing them after it measured the same), more than its size explains.
constexpr int kScaleBatch = 4;

struct ScaleBatch {
  float v[kScaleBatch];
};

// Element e of the index space: which matrix, and the index within it (32-bit
// arithmetic: 64-bit division is a long software sequence, and it cost microseconds).
__device__ __forceinline__ const ScaleCopy& scale_at(const PrepParams& p, int e, int* local) {
  const bool first = e < p.scale_split;
  *local = first ? e : e - p.scale_split;
  return p.scale[first ? 0 : 1];
}

__device__ __forceinline__ void load_scales(const PrepParams& p, int first, int step, ScaleBatch& b) {
#pragma unroll
  for (int u = 0; u < kScaleBatch; ++u) {
    const int e = first + u * step;
    b.v[u] = 0.0f;
    if (e < p.scale_total) {
      int i;
      const ScaleCopy& s = scale_at(p, e, &i);
      const int cols = static_cast<int>(s.cols);
      const int r = i / cols;
      b.v[u] = __ldg(s.src + r * s.stride_row + (i - r * cols) * s.stride_col);
    }
  }
}

__device__ __forceinline__ void store_scales(const PrepParams& p, int first, int step,
                                             const ScaleBatch& b) {
#pragma unroll
  for (int u = 0; u < kScaleBatch; ++u) {
    const int e = first + u * step;
    if (e < p.scale_total) {
      int i;
      const ScaleCopy& s = scale_at(p, e, &i);
      s.dst[i] = b.v[u];
    }
  }
}

// Stores 16 FP8 bytes (as four words) at dst[row * ld + k], converting if asked.
template <PrepOut kOut, Fp8Kind kKind>
__device__ __forceinline__ void store16(void* dst, int64_t offset, uint4 v) {
  if constexpr (kOut == PrepOut::kFp8) {
    if constexpr (kKind == Fp8Kind::kE4M3FNUZ) {
      v = make_uint4(fp8::fnuz_to_fn4(v.x), fp8::fnuz_to_fn4(v.y), fp8::fnuz_to_fn4(v.z),
                     fp8::fnuz_to_fn4(v.w));
    }
    *reinterpret_cast<uint4*>(static_cast<uint8_t*>(dst) + offset) = v;
  } else {
    const uint2 a = fp8::word_to_bf16x4<kKind>(v.x);
    const uint2 b = fp8::word_to_bf16x4<kKind>(v.y);
    const uint2 c = fp8::word_to_bf16x4<kKind>(v.z);
    const uint2 d = fp8::word_to_bf16x4<kKind>(v.w);
    uint4* p = reinterpret_cast<uint4*>(static_cast<uint16_t*>(dst) + offset);
    p[0] = make_uint4(a.x, a.y, b.x, b.y);
    p[1] = make_uint4(c.x, c.y, d.x, d.y);
  }
}

// The 16 K elements of v in OperandPrep::kperm16's order: words hold K 0-3, 4-7, 8-11,
// 12-15 in; out, K {0,1,8,9}, {2,3,10,11}, {4,5,12,13}, {6,7,14,15}.
__device__ __forceinline__ uint4 kperm16(uint4 v) {
  return make_uint4(__byte_perm(v.x, v.z, 0x5410), __byte_perm(v.x, v.z, 0x7632),
                    __byte_perm(v.y, v.w, 0x5410), __byte_perm(v.y, v.w, 0x7632));
}

__device__ __forceinline__ uint32_t pack4(const uint8_t* b) {
  return uint32_t(b[0]) | (uint32_t(b[1]) << 8) | (uint32_t(b[2]) << 16) | (uint32_t(b[3]) << 24);
}

// One work item per block iteration: a 128x128 tile (transpose) or 16 KB of rows
// (row copy). Each thread holds four 16-byte vectors of an item in registers.
constexpr int kVecs = 4;
constexpr int kRowCopyChunks = kVecs * kThreads;  // 16-byte chunks per row-copy item
static_assert((kTile * kTile / 16) / kThreads == kVecs, "transpose item is four vectors per thread");

// Shared-memory tile: row kk holds the 128 row-elements of one k, in 16-byte vectors
// whose position is XOR-swizzled by (kk / 16) so that the transposing reads are free of
// bank conflicts.
__device__ __forceinline__ uint32_t* tile_slot(uint32_t (*smem)[kTile / 4], int q) {
  const int kk = q >> 3;
  return &smem[kk][(4 * (q & 7)) ^ (4 * ((kk >> 4) & 7))];
}

__device__ __forceinline__ void cp_async16(uint32_t* dst, const void* src) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Starts loading a transpose tile into shared memory: 16-byte asynchronous copies where
// the source allows, otherwise (tile edges, unaligned rows) bytes gathered and stored
// directly; zeros outside the operand.
__device__ __forceinline__ void transpose_issue(const PrepJob& j, int64_t tile, uint32_t (*smem)[kTile / 4]) {
  const int tid = threadIdx.x;
  const int64_t r0 = (tile % j.tiles_r) * kTile;
  const int64_t k0 = (tile / j.tiles_r) * kTile;
#pragma unroll
  for (int it = 0; it < kVecs; ++it) {
    const int q = tid + it * kThreads;
    const int64_t k = k0 + (q >> 3);
    const int64_t r = r0 + 16 * (q & 7);
    uint32_t* dst = tile_slot(smem, q);
    if (k < j.k && r < j.rows) {
      const uint8_t* p = j.src + k * j.stride_k + r;
      if (j.vec && r + 16 <= j.rows) {
        cp_async16(dst, p);
      } else {
        uint8_t b[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) b[i] = (r + i < j.rows) ? p[i] : uint8_t(0);
        *reinterpret_cast<uint4*>(dst) = make_uint4(pack4(b), pack4(b + 4), pack4(b + 8), pack4(b + 12));
      }
    } else {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
    }
  }
}

// Thread owns rows 4g..4g+3 and k chunk 16c..16c+15 of the tile: reads 16 words (one per
// k, four rows each), transposes 4x4 byte blocks and stores four 16-byte row pieces.
template <PrepOut kOut, Fp8Kind kKind>
__device__ __forceinline__ void transpose_emit(const PrepJob& j, int64_t tile,
                                               const uint32_t (*smem)[kTile / 4]) {
  const int tid = threadIdx.x;
  const int64_t r0 = (tile % j.tiles_r) * kTile;
  const int64_t k0 = (tile / j.tiles_r) * kTile;
  const int c = tid & 7;
  const int g = tid >> 3;
  const int64_t kout = k0 + 16 * c;
  if (kout >= j.ld) return;
  uint32_t w[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) w[i] = smem[16 * c + i][g ^ (4 * c)];
  uint32_t out[4][4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint32_t lo01 = __byte_perm(w[4 * q + 0], w[4 * q + 1], 0x5140);
    const uint32_t lo23 = __byte_perm(w[4 * q + 2], w[4 * q + 3], 0x5140);
    const uint32_t hi01 = __byte_perm(w[4 * q + 0], w[4 * q + 1], 0x7362);
    const uint32_t hi23 = __byte_perm(w[4 * q + 2], w[4 * q + 3], 0x7362);
    out[0][q] = __byte_perm(lo01, lo23, 0x5410);
    out[1][q] = __byte_perm(lo01, lo23, 0x7632);
    out[2][q] = __byte_perm(hi01, hi23, 0x5410);
    out[3][q] = __byte_perm(hi01, hi23, 0x7632);
  }
#pragma unroll
  for (int rr = 0; rr < 4; ++rr) {
    const int64_t r = r0 + 4 * g + rr;
    if (r < j.rows_out) {
      const uint4 v = make_uint4(out[rr][0], out[rr][1], out[rr][2], out[rr][3]);
      store16<kOut, kKind>(j.dst, r * j.ld + kout, j.kperm16 ? kperm16(v) : v);
    }
  }
}

// Row-copy item: kVecs chunks of 16 elements per thread, consecutive threads on
// consecutive chunks.
__device__ __forceinline__ void rowcopy_load(const PrepJob& j, int64_t item, uint4 (&v)[kVecs]) {
  const int64_t chunks_per_row = j.ld / 16;
#pragma unroll
  for (int it = 0; it < kVecs; ++it) {
    const int64_t chunk = item * kRowCopyChunks + it * kThreads + threadIdx.x;
    const int64_t r = chunk / chunks_per_row;
    const int64_t k = (chunk % chunks_per_row) * 16;
    uint4 val = make_uint4(0u, 0u, 0u, 0u);
    if (r < j.rows) {
      const uint8_t* p = j.src + r * j.stride_row;
      if (j.vec && k + 16 <= j.k) {
        val = __ldg(reinterpret_cast<const uint4*>(p + k));
      } else if (k < j.k) {
        uint8_t b[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) b[i] = (k + i < j.k) ? p[(k + i) * j.stride_k] : uint8_t(0);
        val = make_uint4(pack4(b), pack4(b + 4), pack4(b + 8), pack4(b + 12));
      }
    }
    v[it] = val;
  }
}

template <PrepOut kOut, Fp8Kind kKind>
__device__ __forceinline__ void rowcopy_emit(const PrepJob& j, int64_t item, const uint4 (&v)[kVecs]) {
  const int64_t chunks_per_row = j.ld / 16;
#pragma unroll
  for (int it = 0; it < kVecs; ++it) {
    const int64_t chunk = item * kRowCopyChunks + it * kThreads + threadIdx.x;
    const int64_t r = chunk / chunks_per_row;
    if (r < j.rows_out) {
      store16<kOut, kKind>(j.dst, r * j.ld + (chunk % chunks_per_row) * 16,
                           j.kperm16 ? kperm16(v[it]) : v[it]);
    }
  }
}

// Tiles in flight per block (16 KB each); overridable to time other depths side by side
// (dev/prep_bench.cu).
#ifndef KFGEMM_PREP_STAGES
#define KFGEMM_PREP_STAGES 4
#endif
constexpr int kStages = KFGEMM_PREP_STAGES;

constexpr int kSmemBytes = kStages * kTile * kTile;

struct ItemRef {
  int which;
  int64_t index;
};

__device__ __forceinline__ ItemRef locate(const PrepParams& p, int64_t t) {
  if (p.count > 1 && t >= p.job[0].blocks) return {1, t - p.job[0].blocks};
  return {0, t};
}

// Persistent grid over the items of both jobs (job 0's items first). Transpose tiles
// stream through a kStages-deep ring of shared-memory tiles filled by cp.async, so a
// block keeps the next kStages - 1 tiles' reads in flight while it transposes and
// stores the current one. Row-copy items go through registers.
template <PrepOut kOut, Fp8Kind kKind0, Fp8Kind kKind1>
__global__ void __launch_bounds__(kThreads, 4) prep_kernel(const __grid_constant__ PrepParams p) {
  // The GEMM that reads these operands may be launched as a programmatic dependent of
  // this grid: it waits for our completion (griddepcontrol.wait) before its first read,
  // so letting it launch now only overlaps its start-up with our tail.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  extern __shared__ __align__(128) uint32_t smem_raw[];
  auto smem = reinterpret_cast<uint32_t(*)[kTile][kTile / 4]>(smem_raw);
  const int64_t total =
      (p.count > 0 ? p.job[0].blocks : 0) + (p.count > 1 ? p.job[1].blocks : 0);
  const int64_t step = gridDim.x;
  // Prologue: the first kStages - 1 items of this block.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    const int64_t t = blockIdx.x + s * step;
    if (t < total) {
      const ItemRef it = locate(p, t);
      if (p.job[it.which].mode == Mode::kTranspose) transpose_issue(p.job[it.which], it.index, smem[s]);
    }
    cp_async_commit();
  }
  int stage = 0;
  for (int64_t t = blockIdx.x; t < total; t += step) {
    // Refill the ring slot freed by the previous item (the barrier at the end of the
    // previous iteration ordered its readers before this).
    const int64_t ahead = t + (kStages - 1) * step;
    const int ahead_stage = stage == 0 ? kStages - 1 : stage - 1;
    if (ahead < total) {
      const ItemRef it = locate(p, ahead);
      if (p.job[it.which].mode == Mode::kTranspose) transpose_issue(p.job[it.which], it.index, smem[ahead_stage]);
    }
    cp_async_commit();
    cp_async_wait<kStages - 1>();  // this item's copies have landed (this thread's)
    __syncthreads();               // ... and every thread's
    const ItemRef it = locate(p, t);
    const PrepJob& j = p.job[it.which];
    if (j.mode == Mode::kTranspose) {
      if (it.which == 0) transpose_emit<kOut, kKind0>(j, it.index, smem[stage]);
      else transpose_emit<kOut, kKind1>(j, it.index, smem[stage]);
    } else {
      uint4 v[kVecs];
      rowcopy_load(j, it.index, v);
      if (it.which == 0) rowcopy_emit<kOut, kKind0>(j, it.index, v);
      else rowcopy_emit<kOut, kKind1>(j, it.index, v);
    }
    __syncthreads();  // readers of this slot are done before it is refilled
    stage = stage == kStages - 1 ? 0 : stage + 1;
  }
  cp_async_wait<0>();
  const int scale_step = gridDim.x * kThreads;  // grid: at most the resident blocks
  for (int e = (gridDim.x - 1 - blockIdx.x) * kThreads + threadIdx.x; e < p.scale_total;
       e += kScaleBatch * scale_step) {
    ScaleBatch batch;
    load_scales(p, e, scale_step, batch);
    store_scales(p, e, scale_step, batch);
  }
}

template <PrepOut kOut, Fp8Kind kKind0, Fp8Kind kKind1>
void launch(const PrepParams& p, int64_t total, cudaStream_t stream) {
  // Grid: as many blocks as fit on the device at once (or one per item). Evening out the
  // items per block (fewer blocks) measured 1-2% slower: the copy is bandwidth-bound, so
  // more resident blocks beat a shorter tail.
  static std::atomic<int> resident[64];
  int dev = 0;
  cudaGetDevice(&dev);
  int cap = (dev >= 0 && dev < 64) ? resident[dev].load(std::memory_order_relaxed) : 0;
  if (cap <= 0) {
    int sms = 0, per_sm = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cudaFuncSetAttribute(prep_kernel<kOut, kKind0, kKind1>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, prep_kernel<kOut, kKind0, kKind1>,
                                                  kThreads, kSmemBytes);
    cap = sms * per_sm;
    if (cap <= 0) cap = 1024;
    if (dev >= 0 && dev < 64) resident[dev].store(cap, std::memory_order_relaxed);
  }
  const int64_t grid = total < cap ? total : cap;
  prep_kernel<kOut, kKind0, kKind1><<<static_cast<unsigned>(grid), kThreads, kSmemBytes, stream>>>(p);
}

// The launch for the operands' kinds (job 0's, job 1's).
template <PrepOut kOut>
void launch_kinds(bool nuz0, bool nuz1, const PrepParams& p, int64_t total, cudaStream_t stream) {
  using K = Fp8Kind;
  if (!nuz0 && !nuz1) {
    launch<kOut, K::kE4M3FN, K::kE4M3FN>(p, total, stream);
  } else if (nuz0 && nuz1) {
    launch<kOut, K::kE4M3FNUZ, K::kE4M3FNUZ>(p, total, stream);
  } else if (nuz0) {
    launch<kOut, K::kE4M3FNUZ, K::kE4M3FN>(p, total, stream);
  } else {
    launch<kOut, K::kE4M3FN, K::kE4M3FNUZ>(p, total, stream);
  }
}

}  // namespace

Status prep_operands(const OperandPrep* ops, int count, const ScaleCopy* scales, int scale_count,
                     cudaStream_t stream) {
  if (count < 0 || count > 2 || scale_count < 0 || scale_count > 2 || count + scale_count == 0) {
    return Status::kUnsupported;
  }
  PrepParams p{};
  p.count = count;
  int64_t scale_total = 0;
  for (int i = 0; i < scale_count; ++i) {
    const ScaleCopy& s = scales[i];
    if (s.rows < 1 || s.cols < 1 || !s.src || !s.dst) return Status::kUnsupported;
    if (s.rows * s.cols > kMaxScaleElems - scale_total) return Status::kUnsupported;  // 32-bit indices
    p.scale[i] = s;
    scale_total += s.rows * s.cols;
    if (i == 0) p.scale_split = static_cast<int>(scale_total);
  }
  p.scale_total = static_cast<int>(scale_total);
  int64_t total = 0;
  for (int i = 0; i < count; ++i) {
    const OperandPrep& o = ops[i];
    if (o.rows < 1 || o.k < 1 || o.rows_out < o.rows || o.ld < o.k || o.ld % 16 != 0) {
      return Status::kUnsupported;
    }
    if (o.out != ops[0].out) return Status::kUnsupported;
    if (o.kperm16 && o.out != PrepOut::kFp8) return Status::kUnsupported;
    PrepJob& j = p.job[i];
    j.src = o.src;
    j.rows = o.rows;
    j.rows_out = o.rows_out;
    j.k = o.k;
    j.stride_row = o.stride_row;
    j.stride_k = o.stride_k;
    j.dst = o.dst;
    j.ld = o.ld;
    j.kperm16 = o.kperm16;
    const uintptr_t base = reinterpret_cast<uintptr_t>(o.src);
    if (o.stride_k == 1 || o.k == 1) {
      j.mode = Mode::kRowCopy;
      j.stride_k = 1;
      j.vec = (base % 16 == 0) && (o.stride_row % 16 == 0 || o.rows == 1);
    } else if (o.stride_row == 1 || o.rows == 1) {
      j.mode = Mode::kTranspose;
      j.stride_row = 1;
      j.vec = (base % 16 == 0) && (o.stride_k % 16 == 0);
    } else {
      j.mode = Mode::kRowCopy;
      j.vec = false;
    }
    if (j.mode == Mode::kTranspose) {
      j.tiles_r = (o.rows_out + kTile - 1) / kTile;
      j.blocks = j.tiles_r * ((o.ld + kTile - 1) / kTile);
    } else {
      j.tiles_r = 0;
      j.blocks = (o.rows_out * (o.ld / 16) + kRowCopyChunks - 1) / kRowCopyChunks;
    }
    total += j.blocks;
  }
  if (total > 0x7FFFFFFFLL) return Status::kUnsupported;
  // Enough blocks for the scale copy alone to be spread out (when there are no operands).
  const int64_t grid_items = std::max(total, (scale_total + kThreads - 1) / kThreads);
  const bool nuz0 = count > 0 && ops[0].kind == Fp8Kind::kE4M3FNUZ;
  const bool nuz1 = count > 1 && ops[1].kind == Fp8Kind::kE4M3FNUZ;
  if (count == 0 || ops[0].out == PrepOut::kFp8) {
    launch_kinds<PrepOut::kFp8>(nuz0, nuz1, p, grid_items, stream);
  } else {
    launch_kinds<PrepOut::kBf16>(nuz0, nuz1, p, grid_items, stream);
  }
  return cudaPeekAtLastError() == cudaSuccess ? Status::kOk : Status::kLaunchFailed;
}

}  // namespace kfgemm
