// Host-side interface of the GEMM kernels. Nothing here includes torch: the CUDA
// translation units only see raw pointers, sizes and strides, and the torch binding
// owns validation and memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace kfgemm {

// Result of a launcher. Launchers never abort: they report and let the caller raise.
enum class Status : int {
  kOk = 0,
  kUnsupported = 1,   // the configuration cannot run this problem
  kLaunchFailed = 2,  // a CUDA call failed; see cudaGetLastError / the message
};

// Element type of an FP8 operand as stored in memory.
enum class Fp8Kind : int {
  kE4M3FN = 0,    // OCP e4m3 ("fn"): bias 7, 0x7F/0xFF are NaN, max 448
  kE4M3FNUZ = 1,  // e4m3 "fnuz": bias 8, 0x80 is NaN, no negative zero, max 240
};

// Type written by the operand preparation kernels.
enum class PrepOut : int {
  kFp8 = 0,   // e4m3fn bytes: the input's values (e4m3fnuz re-encoded, fp8::fnuz_to_fn4)
  kBf16 = 1,  // bfloat16, exact value of the input (any FP8 kind)
};

// A logical (rows, k) FP8 matrix with element strides, and the canonical copy the
// GEMM reads: contiguous, K-major, row pitch `ld` elements, `rows_out` >= rows rows;
// columns [k, ld) and rows [rows, rows_out) are written as zeros.
struct OperandPrep {
  const uint8_t* src;
  int64_t rows;
  int64_t rows_out;
  int64_t k;
  int64_t stride_row;  // elements
  int64_t stride_k;    // elements
  Fp8Kind kind;
  void* dst;
  int64_t ld;  // elements of the output type, >= k
  PrepOut out;
  // Write each 16 elements of K in the order the MN-major-A kernels build their A
  // fragments (variants 13 and 14): position 4t + j holds K element 2t + j (j < 2) or
  // 8 + 2t + (j - 2) (j >= 2), t = 0..3. FP8 output only.
  bool kperm16 = false;
};

// A float32 (rows, cols) matrix with element strides copied to the contiguous
// row-major `dst` (block scales for kernels that read them along K).
struct ScaleCopy {
  const float* src;
  int64_t rows, cols;
  int64_t stride_row, stride_col;  // elements
  float* dst;
};

// Most scale elements one launch copies (all matrices together).
constexpr int64_t kMaxScaleElems = int64_t(1) << 30;

// Rewrites up to two operands and up to two scale matrices in one launch: `count` is 0
// to 2, `scale_count` 0 to 2, not both 0.
Status prep_operands(const OperandPrep* ops, int count, const ScaleCopy* scales, int scale_count,
                     cudaStream_t stream);
inline Status prep_operands(const OperandPrep* ops, int count, cudaStream_t stream) {
  return prep_operands(ops, count, nullptr, 0, stream);
}

// Canonical problem for the GEMM kernels:
//   D[m, n] = sum_k A[m, k] * B[n, k] * sfa[m, k / 128] * sfb[n / 128, k / 128]
// A is (m, k) K-major with row pitch lda, B is (n, k) K-major with row pitch ldb, both
// 16-byte aligned with k a multiple of 16 bytes' worth of elements (zero padded).
// Variants 13, 14 and 16 instead read A MN-major (a_mn_major: stored as k_a rows of m
// elements, pitch lda, no padding needed) and B with each 16 of K permuted as
// OperandPrep::kperm16 writes it (b_kperm16). Variants 20 and 21 read A MN-major
// (a_mn_major), variants 22 and 23 A K-major with k_a real columns (not padded); all four
// read B either MN-major (b_mn_major: k_a rows of n_b elements, pitch ldb) or K-major (n_b
// real rows of k_a columns). Every other variant rejects b_mn_major.
// Scales are float32 addressed through element strides (any layout).
struct GemmArgs {
  int m, n, k;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  const float* sfa;
  int64_t sfa_stride_m, sfa_stride_k;
  const float* sfb;
  int64_t sfb_stride_n, sfb_stride_k;
  void* d;  // bfloat16, row pitch ldd (multiple of 8), 16-byte aligned
  int64_t ldd;
  int device;
  int sm_count;
  // Stream-K variants: 0 heuristic, 1 data-parallel, > 1 split-K into that many.
  // Split-K variants 5, 6, 8: the number of K slices (>= 2, k a multiple of 128 * splits).
  // Variants 15, 16, 18: 0 chooses, else 1 to 64 slices, at most one per 128 of K.
  int splits;
  // May launch as a programmatic dependent of the previous kernel on the stream (the
  // operand preparation, or the caller's last kernel): the GEMM's start-up overlaps that
  // kernel's tail, and it touches no global memory before that kernel has completed.
  // Variants built without that wait ignore it.
  bool pdl;
  // Persistent tile schedulers: maximum swizzle of the tile order (1, 2, 4, 8), which
  // keeps neighbouring CTAs on neighbouring tiles for L2 reuse; 0: CUTLASS's default (1).
  int swizzle;
  bool a_mn_major = false;
  int k_a = 0;  // real K (rows of MN-major A, columns of in-place K-major A and B; k may be padded)
  bool b_kperm16 = false;
  bool b_mn_major = false;
  int n_b = 0;  // real N of B read in place (n may be padded beyond it)
};

// Kernel variants. Fp8* read e4m3fn operands and use FP8 tensor cores (fast mode);
// Bf16* read bfloat16 operands (exactly converted FP8) and use BF16 tensor cores
// (exact mode). Both promote into an FP32 accumulator once per 128 of K.
enum class Variant : int {
  kFp8Coop128x128StreamK = 0,
  kFp8Coop128x128Cluster2 = 1,
  kFp8Pingpong64x128 = 2,
  kBf16Coop128x128StreamK = 3,
  kBf16Pingpong64x128 = 4,
  kFp8Pingpong64x128SplitK = 5,
  kFp8Coop128x128SplitK = 6,
  kFp8Coop128x128 = 7,
  kBf16Pingpong64x128SplitK = 8,
  kBf16Coop128x128 = 9,
  kFp8Coop128x128Overlap = 10,  // hand-written: promotion overlapped with the next MMAs
  kFp8ClusterSplitK = 11,       // hand-written: few rows, K split over a cluster (splits 1-8)
  kFp8Coop128x128OverlapCluster2 = 12,  // variant 10 on CTA pairs sharing B by multicast
  kFp8Coop128x128OverlapAmn = 13,       // variant 10 reading A MN-major (fragments built in registers)
  kFp8Coop128x128OverlapAmnCluster2 = 14,  // variant 13 on CTA pairs sharing B by multicast
  kFp8Coop128x128OverlapSplitK = 15,       // variant 10 with K split into slices, summed in-kernel
  kFp8Coop128x128OverlapAmnSplitK = 16,    // variant 13 with K split into slices, summed in-kernel
  kBf16Coop128x128Overlap = 17,            // variant 10 on BF16 operands (exact mode)
  kFp8FewRow = 18,  // hand-written: few rows, every SM streaming B, K slices summed by reduce_splits
  kFp8FewRowExact = 19,  // variant 18 in exact mode: B as FP16 fragments in registers, A as FP16 in shared memory
  kFp8Coop128x128ExactAmn = 20,  // variant 10's pipeline in exact mode on FP8 operands read in place, A MN-major
                                 // and B either way: A as FP16 fragments in registers, B as an FP16 copy
                                 // in shared memory
  kFp8Coop128x128ExactAmnSplitK = 21,  // variant 20 with K split into slices, summed in-kernel (as 15)
  kFp8Coop128x128ExactAk = 22,  // variant 20 reading A K-major in place, B K-major or MN-major
  kFp8Coop128x128ExactAkSplitK = 23,  // variant 22 with K split into slices, summed in-kernel
  kCount = 24,
};

const char* variant_name(Variant v);

// The variants that read A MN-major in place and B K-permuted (GemmArgs::a_mn_major).
inline bool reads_a_mn_major(Variant v) {
  return v == Variant::kFp8Coop128x128OverlapAmn || v == Variant::kFp8Coop128x128OverlapAmnCluster2 ||
         v == Variant::kFp8Coop128x128OverlapAmnSplitK;
}

// The exact-mode variants that read A MN-major in place (a_mn_major) and B in place
// MN-major (b_mn_major) or K-major: e4m3fn, with the real extents k_a and n_b.
inline bool exact_in_place_amn(Variant v) {
  return v == Variant::kFp8Coop128x128ExactAmn || v == Variant::kFp8Coop128x128ExactAmnSplitK;
}

// The exact-mode variants that read A K-major in place and B in place K-major or, with
// b_mn_major, MN-major: e4m3fn, any K (TMA reads zeros past it), with the real extents
// k_a and n_b.
inline bool exact_in_place_ak(Variant v) {
  return v == Variant::kFp8Coop128x128ExactAk || v == Variant::kFp8Coop128x128ExactAkSplitK;
}

// Variants 20 to 23: exact mode on e4m3fn operands both read in place and converted to
// FP16 in the kernel.
inline bool exact_in_place(Variant v) { return exact_in_place_amn(v) || exact_in_place_ak(v); }

// The hand-written kernel's split-K builds (splits 0 to 64, counters zeroed before launch).
inline bool is_overlap_split(Variant v) {
  return v == Variant::kFp8Coop128x128OverlapSplitK || v == Variant::kFp8Coop128x128OverlapAmnSplitK ||
         v == Variant::kFp8Coop128x128ExactAmnSplitK || v == Variant::kFp8Coop128x128ExactAkSplitK;
}

// Sums `splits` FP32 planes of (m, n) partial products (plane after plane, rows of n
// floats) into the bfloat16 (m, n) matrix d with row pitch ldd, in slice order.
// n must be a multiple of 4, d 8-byte aligned and ldd a multiple of 4.
Status reduce_splits(const float* partials, int splits, int m, int n, void* d, int64_t ldd,
                     int sm_count, cudaStream_t stream);

// Bytes of scratch the variant needs for this problem (stream-K partials, locks).
size_t gemm_workspace_size(Variant v, const GemmArgs& args);

// How many leading bytes of that workspace must be zero when the kernel starts (split-K
// arrival counters); the caller clears them on the stream before the launch.
size_t gemm_workspace_zeroed_bytes(Variant v, const GemmArgs& args);

// Launches on `stream`. `workspace` must hold gemm_workspace_size bytes (may be
// nullptr when that is 0). Writes a short reason into `why` (if not null) on failure.
Status gemm_run(Variant v, const GemmArgs& args, void* workspace, cudaStream_t stream,
                const char** why);

// Per-1x128 (activation) and per-128x128 (weight) quantization of a (rows, cols)
// float32/bfloat16 row-major matrix into FP8 of `kind`, with float32 scales:
//   group scale s = amax(group) / fp8_max (1 where amax is 0), q = x / s.
// Activation scales are written as (rows, ceil(cols/128)) row-major; weight scales
// as (ceil(rows/128), ceil(cols/128)) row-major.
enum class QuantIn : int { kF32 = 0, kBf16 = 1 };
Status quantize_1x128(const void* x, QuantIn in, int64_t rows, int64_t cols, int64_t ldx,
                      Fp8Kind kind, uint8_t* q, float* scale, cudaStream_t stream);
Status quantize_128x128(const void* x, QuantIn in, int64_t rows, int64_t cols, int64_t ldx,
                        Fp8Kind kind, uint8_t* q, float* scale, cudaStream_t stream);

}  // namespace kfgemm
