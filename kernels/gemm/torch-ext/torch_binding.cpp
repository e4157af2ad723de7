#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <type_traits>
#include <atomic>
#include <cstdint>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>

#include "registration.h"
#include "torch_binding.h"

#if __has_include("gemm_api.h")
#include "gemm_api.h"
#else
#include "../gemm/gemm_api.h"
#endif

namespace {

using at::Tensor;

constexpr int64_t kBlock = 128;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

bool is_fp8(const Tensor& t) {
  return t.scalar_type() == at::kFloat8_e4m3fn || t.scalar_type() == at::kFloat8_e4m3fnuz;
}

// Error text is assembled with std::to_string and handed to TORCH_CHECK as a single
// std::string, so nothing in this library formats numbers through iostreams: with a
// host compiler that links its own static libstdc++ into the extension, iostream
// number formatting inside the extension crashes (NOTES.md).
inline std::string piece(const char* s) { return s; }
inline std::string piece(const std::string& s) { return s; }
inline std::string piece(c10::ScalarType t) { return c10::toString(t); }
inline std::string piece(const c10::Device& d) { return d.str(); }
template <typename T, typename = std::enable_if_t<std::is_integral_v<T>>>
inline std::string piece(T v) { return std::to_string(v); }

template <typename... Args>
std::string cat(const Args&... args) {
  std::string out;
  (out.append(piece(args)), ...);
  return out;
}

std::string shape_str(const Tensor& t) {
  std::string s = "(";
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (i) s += ", ";
    s += std::to_string(t.size(i));
  }
  return s + (t.dim() == 1 ? ",)" : ")");
}

void check_tensor_2d(const Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.defined(), cat(name, " must be a tensor, got None"));
  TORCH_CHECK_VALUE(t.dim() == 2, cat(name, " must be 2-D, got shape ", shape_str(t)));
}

void check_device(const Tensor& t, const char* name, const Tensor& ref) {
  TORCH_CHECK_VALUE(t.is_cuda(), cat(name, " must be on a CUDA device, got ", t.device()));
  TORCH_CHECK_VALUE(t.device() == ref.device(), cat(name, " must be on ", ref.device(), " like a, got ", t.device()));
}

// True when two distinct indices of the 2-D tensor x address one element, exactly (the
// Python layer's has_overlap; at::has_internal_overlap leaves strided views undecided).
// With sizes r, c > 1 and strides sr, sc > 0, indices (i, j) and (i + di, j + dj) meet
// when di * sr = -dj * sc, whose smallest nonzero solution is |di| = sc / g,
// |dj| = sr / g (g = gcd(sr, sc)): they meet exactly when that step fits in the tensor.
// Interleaved rows (shape (2, 3), strides (3, 2)) do not overlap.
bool has_overlap(const Tensor& x) {
  const int64_t r = x.size(0), c = x.size(1), sr = x.stride(0), sc = x.stride(1);
  if (r == 0 || c == 0) return false;  // no elements
  if (r == 1 || c == 1) {
    const int64_t n = r == 1 ? c : r, s = r == 1 ? sc : sr;
    return n > 1 && s == 0;
  }
  if (sc == 0 || sr == 0) return true;
  const int64_t g = std::gcd(sr, sc);
  return sc / g <= r - 1 && sr / g <= c - 1;
}

// The addresses [first, last) that x's elements lie in (strides are never negative);
// {0, 0} when x is empty.
std::pair<uintptr_t, uintptr_t> byte_span(const Tensor& x) {
  if (x.numel() == 0) return {0, 0};
  int64_t last = 0;
  for (int64_t d = 0; d < x.dim(); ++d) last += (x.size(d) - 1) * x.stride(d);
  const auto first = reinterpret_cast<uintptr_t>(x.data_ptr());
  return {first, first + static_cast<uintptr_t>((last + 1) * x.element_size())};
}

// Whether the address ranges of x and y intersect: conservative, two views that
// interleave without a common byte count as sharing (the Python layer's shares_memory).
bool shares_memory(const Tensor& x, const Tensor& y) {
  const auto [x0, x1] = byte_span(x);
  const auto [y0, y1] = byte_span(y);
  return x0 < x1 && y0 < y1 && x0 < y1 && y0 < x1;
}

// Validates the NT-convention arguments; returns (M, N, K).
std::tuple<int64_t, int64_t, int64_t> check_nt(const Tensor* out, const Tensor& a, const Tensor& b,
                                               const Tensor& a_scale, const Tensor& b_scale) {
  check_tensor_2d(a, "a");
  check_tensor_2d(b, "b");
  check_tensor_2d(a_scale, "a_scale");
  check_tensor_2d(b_scale, "b_scale");
  TORCH_CHECK_TYPE(is_fp8(a), cat("a must be float8_e4m3fn or float8_e4m3fnuz, got ", a.scalar_type()));
  TORCH_CHECK_TYPE(is_fp8(b), cat("b must be float8_e4m3fn or float8_e4m3fnuz, got ", b.scalar_type()));
  TORCH_CHECK_TYPE(a_scale.scalar_type() == at::kFloat, cat("a_scale must be float32, got ", a_scale.scalar_type()));
  TORCH_CHECK_TYPE(b_scale.scalar_type() == at::kFloat, cat("b_scale must be float32, got ", b_scale.scalar_type()));
  const int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  TORCH_CHECK_VALUE(b.size(1) == K, cat("b must have K = a.size(1) = ", K, " columns, got shape ", shape_str(b)));
  const int64_t KB = ceil_div(K, kBlock), NB = ceil_div(N, kBlock);
  TORCH_CHECK_VALUE(a_scale.size(0) == M && a_scale.size(1) == KB, cat("a_scale must have shape (", M, ", ", KB, "), got ", shape_str(a_scale)));
  TORCH_CHECK_VALUE(b_scale.size(0) == NB && b_scale.size(1) == KB, cat("b_scale must have shape (", NB, ", ", KB, "), got ", shape_str(b_scale)));
  if (out) {
    check_tensor_2d(*out, "out");
    TORCH_CHECK_TYPE(out->scalar_type() == at::kBFloat16, cat("out must be bfloat16, got ", out->scalar_type()));
    TORCH_CHECK_VALUE(out->size(0) == M && out->size(1) == N, cat("out must have shape (", M, ", ", N, "), got ", shape_str(*out)));
    TORCH_CHECK_VALUE(!has_overlap(*out), cat("out must not have overlapping elements, got strides (", out->stride(0), ", ",
                          out->stride(1), ")"));
  }
  check_device(a, "a", a);
  check_device(b, "b", a);
  check_device(a_scale, "a_scale", a);
  check_device(b_scale, "b_scale", a);
  if (out) {
    check_device(*out, "out", a);
    // The kernels read the inputs while they write out: no byte may be both.
    const std::pair<const Tensor*, const char*> inputs[] = {
        {&a, "a"}, {&b, "b"}, {&a_scale, "a_scale"}, {&b_scale, "b_scale"}};
    for (const auto& [x, name] : inputs) {
      TORCH_CHECK_VALUE(!shares_memory(*out, *x),
                        cat("out must not share memory with ", name, " (their address ranges intersect)"));
    }
  }
  return {M, N, K};
}

struct DeviceInfo {
  int major = 0;
  int minor = 0;
  int sm_count = 0;
  int mem_gbs = 0;  // peak memory bandwidth in GB/s from the memory clock and bus width; 0 if unknown
};

// Attributes of a device, read once (cudaDeviceGetAttribute does not synchronize).
DeviceInfo device_info(int dev) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices][4] = {};
  TORCH_CHECK(dev >= 0 && dev < kMaxDevices, cat("device index ", dev, " out of range"));
  DeviceInfo info;
  info.major = cached[dev][0].load(std::memory_order_acquire);
  if (info.major > 0) {
    info.minor = cached[dev][1].load(std::memory_order_relaxed);
    info.sm_count = cached[dev][2].load(std::memory_order_relaxed);
    info.mem_gbs = cached[dev][3].load(std::memory_order_relaxed);
    return info;
  }
  TORCH_CHECK(cudaDeviceGetAttribute(&info.minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
                  cudaDeviceGetAttribute(&info.sm_count, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
                  cudaDeviceGetAttribute(&info.major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess, cat("cannot read the attributes of CUDA device ", dev));
  int clock_khz = 0, bus_bits = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev) == cudaSuccess) {
    // Double data rate: two transfers per clock over the bus.
    info.mem_gbs = static_cast<int>(2.0 * clock_khz * 1e3 * (bus_bits / 8) / 1e9);
  } else {
    (void)cudaGetLastError();  // an unknown bandwidth only affects the kernel choice
  }
  cached[dev][1].store(info.minor, std::memory_order_relaxed);
  cached[dev][2].store(info.sm_count, std::memory_order_relaxed);
  cached[dev][3].store(info.mem_gbs, std::memory_order_relaxed);
  cached[dev][0].store(info.major, std::memory_order_release);
  return info;
}

// The kernels' TMA descriptors are encoded through the driver API, which needs the
// device's context current on the calling thread. The runtime makes it current on the
// first runtime call that needs one, or on cudaSetDevice. A thread whose device is the
// default one may have made neither: the device guard skips cudaSetDevice when the device
// does not change, and allocations served from torch's cache make no runtime call. So
// each thread calls cudaSetDevice once itself (later device changes go through
// cudaSetDevice in the guard).
void bind_context(int dev) {
  thread_local bool bound = false;
  if (bound) return;
  TORCH_CHECK(cudaSetDevice(dev) == cudaSuccess, cat("cannot make CUDA device ", dev, " current: ", cudaGetErrorString(cudaGetLastError())));
  bound = true;
}

cudaStream_t current_stream(int dev) { return c10::cuda::getCurrentCUDAStream(dev).stream(); }

kfgemm::Fp8Kind kind_of(const Tensor& t) {
  return t.scalar_type() == at::kFloat8_e4m3fnuz ? kfgemm::Fp8Kind::kE4M3FNUZ
                                                 : kfgemm::Fp8Kind::kE4M3FN;
}

// Operand as the GEMM reads it: pointer and row pitch, plus the buffer that holds it.
struct Canonical {
  const void* ptr = nullptr;
  int64_t ld = 0;
  Tensor storage;
};

// Whether the kernels that read operands K-major in place in exact mode (variants 22,
// 23: A always, B where it is stored so) can take `x`: e4m3fn, K contiguous, rows
// 16-byte aligned (any K: TMA reads zeros past it).
bool k_major_ok(const Tensor& x) {
  const int64_t rows = x.size(0), K = x.size(1);
  return x.scalar_type() == at::kFloat8_e4m3fn && (x.stride(1) == 1 || K == 1) &&
         (rows == 1 || (x.stride(0) % 16 == 0 && x.stride(0) >= K)) &&
         reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
}

// Whether the GEMM kernels read the FP8 operand x, as `rows_out` rows, in place: as
// k_major_ok, with K a multiple of 16 (and a pitch of at least K even for one row).
bool fp8_in_place(const Tensor& x, int64_t rows_out) {
  return k_major_ok(x) && rows_out == x.size(0) && x.size(1) % 16 == 0 &&
         x.stride(0) >= x.size(1);
}

// Whether a block-scale matrix is row-major along K (what the hand-written kernels read
// in place; the op copies other layouts for them).
bool scales_row_major(const Tensor& s) { return s.size(1) <= 1 || s.stride(1) == 1; }

// Whether the hand-written kernels read the block-scale matrix s in place: row-major
// along K, or, on FP8 operands, any layout with at most four blocks along K (K <= 512).
// Along K a column-major matrix misses L1 on every block; over a few blocks that costs
// less than the copy, which lengthens the preparation launch or adds one (H100,
// interleaved, us, in place against the copy: challenge 6144x7168x256 45.1 vs 46.8,
// 4096x7168x256 33.9 vs 35.0, 8192x7168x256 56.1 vs 57.8, 6144x4096x512 41.1 vs 41.9,
// 6144x7168x512 62.4 vs 61.9; guide 6144x7168x256 44.4 vs 45.8; A MN-major, B K-major
// 6144x4096x512 39.1 vs 40.8; K-major operands, where the copy is the only preparation,
// 6144x4096x512 34.3 vs 36.2, 4096x32768x512 161.1 vs 166.1 on CTA pairs, which that
// now allows). Over many blocks the misses cost more (6144x7168x2048 206.5 vs 181.3,
// 6144x4608x7168 465.0 vs 411.4, 1024x1536x7168 46.1 vs 44.3; NOTES.md, v49).
bool scales_in_place(const Tensor& s, bool bf16) {
  return scales_row_major(s) || (!bf16 && s.size(1) <= 4);
}

// Returns x itself when the kernel can read it in place, otherwise schedules a
// rewrite into `job` and returns the destination.
// kperm16: always rewrite, with each 16 of K in the order of the kernels that read A
// MN-major (OperandPrep::kperm16).
Canonical canonical_operand(const Tensor& x, int64_t rows_out, bool to_bf16,
                            kfgemm::OperandPrep* job, bool* needs_job, bool kperm16 = false) {
  const int64_t rows = x.size(0), K = x.size(1);
  const int64_t Kp = round_up(K, 16);
  *needs_job = false;
  if (!kperm16 && !to_bf16 && fp8_in_place(x, rows_out)) {
    Canonical c;
    c.ptr = x.data_ptr();
    c.ld = rows == 1 ? K : x.stride(0);
    return c;
  }
  Canonical c;
  c.storage = at::empty({rows_out * Kp}, x.options().dtype(to_bf16 ? at::kBFloat16 : at::kByte));
  c.ptr = c.storage.data_ptr();
  c.ld = Kp;
  job->src = static_cast<const uint8_t*>(x.data_ptr());
  job->rows = rows;
  job->rows_out = rows_out;
  job->k = K;
  job->stride_row = x.stride(0);
  job->stride_k = x.stride(1);
  job->kind = kind_of(x);
  job->dst = c.storage.data_ptr();
  job->ld = Kp;
  job->out = to_bf16 ? kfgemm::PrepOut::kBf16 : kfgemm::PrepOut::kFp8;
  job->kperm16 = kperm16;
  *needs_job = true;
  return c;
}

void check_status(kfgemm::Status st, const char* what, const char* why) {
  TORCH_CHECK(st == kfgemm::Status::kOk, cat(what, " failed: ", why ? why : "unknown reason", " (", cudaGetErrorString(cudaGetLastError()), ")"));
}

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
//    K; where memory is slower on CTA pairs sharing B with K >= 2304, or with K <= 512,
//    N >= 16384 and nothing to prepare (v11, v12, v46);
//  - where memory is slower, 65-128 rows with K <= 1024 over a wave or more and nothing
//    to prepare: the hand-written kernel (v28); 129-1024 rows whose 64x128 tiles fit in
//    one wave, any K and layout: the ping-pong kernel (v46);
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
bool splits_fit(int64_t Kp, int64_t splits) { return splits >= 2 && Kp % (128 * splits) == 0; }

// Smallest slice count that tiles K and gives at least `want` work units from `tiles`
// output tiles; where none does (up to 16 slices), the largest that tiles K, since more
// units still beat fewer there (H100, interleaved, us: 64x512x7168, 4 tiles, 12.5 with 8
// slices against 21.5 unsplit; NOTES.md, v17); 0 if no count tiles K.
int split_for(int64_t Kp, int64_t tiles, int64_t want) {
  int largest = 0;
  for (int s = 2; s <= 16; ++s) {
    if (!splits_fit(Kp, s)) continue;
    if (tiles * s >= want) return s;
    largest = s;
  }
  return largest;
}

// Whether the kernels that read an operand MN-major in place (A: variants 13, 14, 16, 20
// and 21; B: variants 20-23) can take the (rows, K) view `x`: e4m3fn, rows contiguous, rows of
// K 16-byte aligned.
bool mn_major_ok(const Tensor& x) {
  const int64_t rows = x.size(0);
  return x.scalar_type() == at::kFloat8_e4m3fn && rows > 1 && x.stride(0) == 1 &&
         x.stride(1) >= rows && x.stride(1) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
}

// Row pitch of an operand read in place K-major (one row: any multiple of 16 >= K).
int64_t k_major_pitch(const Tensor& x) {
  return x.size(0) == 1 ? round_up(x.size(1), 16) : x.stride(0);
}

// The hand-written kernel's builds that want the block scales row-major (variants 10,
// 12-17: they read them along K). Variants 20 to 23 read them in place, so that nothing
// runs before them.
bool wants_row_major_scales(kfgemm::Variant v) {
  using V = kfgemm::Variant;
  return v == V::kFp8Coop128x128Overlap || v == V::kFp8Coop128x128OverlapCluster2 ||
         v == V::kBf16Coop128x128Overlap || kfgemm::reads_a_mn_major(v) ||
         (kfgemm::is_overlap_split(v) && !kfgemm::exact_in_place(v));
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
};

Choice pick_variant(int64_t M, int64_t N, int64_t K, const Traits& t, int sm_count, int mem_gbs) {
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
    if ((slow_memory && K >= 2304) || (in_place && K <= 512 && N >= 16384)) {
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

bool variant_is_split_k(kfgemm::Variant v) {
  return v == kfgemm::Variant::kFp8Pingpong64x128SplitK || v == kfgemm::Variant::kFp8Coop128x128SplitK ||
         v == kfgemm::Variant::kBf16Pingpong64x128SplitK;
}

// Exact-mode variants that read e4m3fn operands and convert them to FP16 themselves.
bool converts_fp8_itself(kfgemm::Variant v) {
  return v == kfgemm::Variant::kFp8FewRowExact || kfgemm::exact_in_place(v);
}

// The variants of exact mode: 16-bit tensor cores, BF16 operands prepared by the op,
// except variants 19 to 23, which convert e4m3fn ones themselves.
bool variant_is_bf16(kfgemm::Variant v) {
  return v == kfgemm::Variant::kBf16Coop128x128StreamK || v == kfgemm::Variant::kBf16Pingpong64x128 ||
         v == kfgemm::Variant::kBf16Pingpong64x128SplitK || v == kfgemm::Variant::kBf16Coop128x128 ||
         v == kfgemm::Variant::kBf16Coop128x128Overlap || converts_fp8_itself(v);
}


// Scales are read in place through their strides (int32 in the kernel); others are
// copied first, contiguous (so row-major).
bool scale_strides_fit(const Tensor& s) {
  return s.stride(0) >= 0 && s.stride(1) >= 0 && s.stride(0) < INT32_MAX && s.stride(1) < INT32_MAX;
}

Tensor scales_for_kernel(const Tensor& s) { return scale_strides_fit(s) ? s : s.contiguous(); }

// The choice's inputs from the caller's tensors (scales as given: nothing is copied here).
Traits traits_of(const Tensor& a, const Tensor& b, const Tensor& sa, const Tensor& sb,
                 int64_t M, int64_t N, bool exact) {
  // Fast mode: scales the op would copy first are not read in place.
  auto in_place_for_kernel = [](const Tensor& s) {
    return !scale_strides_fit(s) || scales_in_place(s, false);
  };
  Traits t{};
  // Fast mode reads e4m3fnuz operands re-encoded as e4m3fn by the preparation pass
  // (fp8::fnuz_to_fn4), exact mode converted to BF16.
  t.exact = exact;
  const bool a_mn_ok = mn_major_ok(a);  // e4m3fn, read MN-major in place
  t.amn_ok = a_mn_ok && (mn_major_ok(b) || k_major_ok(b));
  t.ak_ok = k_major_ok(a) && (k_major_ok(b) || mn_major_ok(b));
  t.b_k = k_major_ok(b);
  t.a_mn = !exact && a_mn_ok;
  t.in_place = !exact && fp8_in_place(a, M) && fp8_in_place(b, round_up(N, 8)) &&
               in_place_for_kernel(sa) && in_place_for_kernel(sb);
  t.fn_operands =
      kind_of(a) == kfgemm::Fp8Kind::kE4M3FN && kind_of(b) == kfgemm::Fp8Kind::kE4M3FN;
  return t;
}

DeviceInfo hopper_info(int dev) {
  const DeviceInfo props = device_info(dev);
  TORCH_CHECK(props.major == 9, cat("this gemm needs a Hopper GPU (compute capability 9.x); device ", dev, " is ", props.major, ".", props.minor));
  return props;
}

void run_nt(Tensor& out, const Tensor& a, const Tensor& b, const Tensor& a_scale,
            const Tensor& b_scale, bool exact, int64_t variant, int64_t splits, int64_t swizzle) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  if (M == 0 || N == 0) return;
  if (K == 0) {
    out.zero_();
    return;
  }
  const c10::cuda::CUDAGuard guard(a.device());
  const int dev = a.get_device();
  bind_context(dev);
  const DeviceInfo props = hopper_info(dev);
  TORCH_CHECK_VALUE(M <= INT32_MAX && N <= INT32_MAX - 128 && K <= INT32_MAX - 128,
                    cat("a, b: M = ", M, ", N = ", N, ", K = ", K, " do not fit this op's 32-bit "
                        "indices (M at most 2147483647, N and K at most 2147483519); fix: split the "
                        "product along the dimension that is too large"));
  cudaStream_t stream = current_stream(dev);

  const Traits t = traits_of(a, b, a_scale, b_scale, M, N, exact);
  Tensor sa = scales_for_kernel(a_scale);
  Tensor sb = scales_for_kernel(b_scale);
  const Choice choice = pick_variant(M, N, K, t, props.sm_count, props.mem_gbs);
  kfgemm::Variant v = choice.variant;
  if (variant >= 0) {
    TORCH_CHECK_VALUE(variant < static_cast<int64_t>(kfgemm::Variant::kCount), cat("variant must be < ", static_cast<int>(kfgemm::Variant::kCount)));
    v = static_cast<kfgemm::Variant>(variant);
    if (converts_fp8_itself(v)) {
      TORCH_CHECK_VALUE(exact && t.fn_operands,
                        cat("variant ", kfgemm::variant_name(v), " runs exact mode on float8_e4m3fn operands: pass exact=True and e4m3fn a and b"));
    }
    TORCH_CHECK_VALUE(variant_is_bf16(v) == t.exact, cat("variant ", kfgemm::variant_name(v), " runs ", t.exact ? "fast" : "exact", " mode: pass exact=", t.exact ? "False" : "True"));
  }
  if (splits < 0) splits = v == choice.variant ? choice.splits : 0;
  // Variants 19 to 23 convert e4m3fn operands themselves, so they stay FP8 here.
  const bool bf16_operands = t.exact && !converts_fp8_itself(v);
  const bool amn_x = kfgemm::exact_in_place_amn(v);
  const bool ak = kfgemm::exact_in_place_ak(v);
  // B read in place by variants 20-23: MN-major where A is (variants 20, 21) and B can
  // be, K-major where A is (22, 23) and B can be, else the other way.
  const bool x_b_mn = (amn_x && mn_major_ok(b)) || (ak && !k_major_ok(b));
  if (ak) {
    TORCH_CHECK_VALUE(t.ak_ok, cat("variant ", kfgemm::variant_name(v), " reads A K-major and B in place: a must be float8_e4m3fn with stride(1) == 1 and 16-byte aligned rows (stride(0) a multiple of 16 and >= K), b float8_e4m3fn stored the same way or MN-major (stride(0) == 1, N > 1, stride(1) a multiple of 16 and >= N), both 16-byte aligned"));
  }
  if (amn_x) {
    TORCH_CHECK_VALUE(t.amn_ok, cat("variant ", kfgemm::variant_name(v), " reads A MN-major and B in place: a must be a float8_e4m3fn transposed view of a (K, M) buffer (stride(0) == 1, M > 1) whose rows are 16-byte aligned (stride(1) a multiple of 16 and >= M), b float8_e4m3fn stored the same way or K-major (stride(1) == 1, stride(0) a multiple of 16 and >= K), both 16-byte aligned"));
  }
  TORCH_CHECK_VALUE(swizzle == 0 || swizzle == 1 || swizzle == 2 || swizzle == 4 || swizzle == 8,
                    cat("swizzle must be 0 (the default, 1), 1, 2, 4 or 8, got ", swizzle));
  if (v == kfgemm::Variant::kFp8ClusterSplitK) {
    TORCH_CHECK_VALUE(splits <= 0 || splits == 1 || splits == 2 || splits == 4 || splits == 8,
                      cat("splits=", splits, " does not fit variant ", kfgemm::variant_name(v),
                          ": it is the cluster size, 1, 2, 4 or 8 (0: chosen from the shape)"));
  }
  if (kfgemm::reads_a_mn_major(v)) {
    TORCH_CHECK_VALUE(t.a_mn, cat("variant ", kfgemm::variant_name(v), " reads A in place MN-major: a must be a float8_e4m3fn transposed view of a (K, M) buffer (a.stride(0) == 1, M > 1) whose rows are 16-byte aligned (a.stride(1) a multiple of 16 and >= M)"));
  }
  if (kfgemm::is_overlap_split(v) || v == kfgemm::Variant::kFp8FewRow ||
      v == kfgemm::Variant::kFp8FewRowExact) {
    const int64_t kblocks = ceil_div(K, 128);
    TORCH_CHECK_VALUE(splits <= std::min<int64_t>(64, kblocks),
                      cat("splits=", splits, " does not fit variant ", kfgemm::variant_name(v),
                          ": it takes 1 to 64 slices and at most one per 128 of K (here ",
                          kblocks, " blocks), or 0 to choose"));
  }
  if (variant_is_split_k(v)) {
    TORCH_CHECK_VALUE(splits_fit(round_up(K, 16), splits),
                      cat("splits=", splits, " does not fit variant ", kfgemm::variant_name(v),
                          ": it needs splits >= 2 with K (padded to a multiple of 16, here ",
                          round_up(K, 16), ") a multiple of 128 * splits"));
  }

  // The epilogue stores rows of 8 bf16 (16 bytes): pad N to a multiple of 8 (B gets
  // zero rows, the result goes through a temporary).
  const int64_t Np = round_up(N, 8);
  kfgemm::OperandPrep jobs[2];
  int njobs = 0;
  bool need = false;
  const bool amn = kfgemm::reads_a_mn_major(v);
  Canonical ca, cb;
  if (amn || amn_x) {  // read in place
    ca.ptr = a.data_ptr();
    ca.ld = a.stride(1);
  } else if (ak) {
    ca.ptr = a.data_ptr();
    ca.ld = k_major_pitch(a);
  } else {
    ca = canonical_operand(a, M, bf16_operands, &jobs[njobs], &need);
    njobs += need;
  }
  if (x_b_mn) {
    cb.ptr = b.data_ptr();
    cb.ld = b.stride(1);
  } else if (amn_x || ak) {
    cb.ptr = b.data_ptr();
    cb.ld = k_major_pitch(b);
  } else {
    cb = canonical_operand(b, Np, bf16_operands, &jobs[njobs], &need, amn);
    njobs += need;
  }
  // The hand-written kernel reads each thread's scales along K, two blocks ahead: with
  // row-major scales a 32-byte sector serves 8 blocks from L1, with the challenge's
  // column-major ones every block misses (NOTES.md, v10). Those are copied row-major in
  // the preparation launch, unless K has at most four blocks (FP8 operands;
  // scales_in_place). Except A's for the builds that read A MN-major: there a
  // thread's two rows are adjacent and a warp's 16 rows share 64 bytes of a column-major
  // block, and reading them in place is faster than the copy (H100, interleaved, us:
  // 6144x576x7168 challenge 75.1 vs 87.0, 6144x512x7168 71.9 vs 76.3; NOTES.md, v16).
  kfgemm::ScaleCopy scale_jobs[2];
  int nscales = 0;
  if (wants_row_major_scales(v)) {
    for (Tensor* s : {&sa, &sb}) {
      if (s == &sa && amn) continue;
      if (!scales_in_place(*s, variant_is_bf16(v))) {
        if (s->numel() > kfgemm::kMaxScaleElems / 2) {  // beyond the launch's indexing
          *s = s->contiguous();
          continue;
        }
        Tensor row_major = at::empty(s->sizes(), s->options());
        scale_jobs[nscales++] = {s->data_ptr<float>(), s->size(0), s->size(1), s->stride(0),
                                 s->stride(1), row_major.data_ptr<float>()};
        *s = row_major;
      }
    }
  }

  const auto out_addr = reinterpret_cast<uintptr_t>(out.data_ptr());
  const bool out_direct = Np == N && out.stride(1) == 1 && out_addr % 16 == 0 &&
                          (M == 1 || (out.stride(0) % 8 == 0 && out.stride(0) >= N));
  Tensor dst = out_direct ? out : at::empty({M, Np}, out.options());

  // Both operands are zero padded to a multiple of 16 along K (the TMA box needs
  // 16-byte rows); the padding contributes zeros and K's 128-blocks are unchanged.
  const int64_t Kp = round_up(K, 16);
  kfgemm::GemmArgs g{};
  g.m = static_cast<int>(M);
  g.n = static_cast<int>(Np);
  g.k = static_cast<int>(Kp);
  g.a = ca.ptr;
  g.lda = ca.ld;
  g.b = cb.ptr;
  g.ldb = cb.ld;
  g.sfa = sa.data_ptr<float>();
  g.sfa_stride_m = sa.stride(0);
  g.sfa_stride_k = sa.stride(1);
  g.sfb = sb.data_ptr<float>();
  g.sfb_stride_n = sb.stride(0);
  g.sfb_stride_k = sb.stride(1);
  g.d = dst.data_ptr();
  g.ldd = (out_direct && M == 1) ? Np : dst.stride(0);
  g.device = dev;
  g.sm_count = props.sm_count;
  g.splits = static_cast<int>(std::max<int64_t>(splits, 0));
  // Every kernel built with the in-kernel wait launches as a programmatic dependent of
  // whatever kernel precedes it on the stream (the preparation, or the caller's last
  // kernel): its launch and set-up overlap that kernel's tail, and it touches no global
  // memory before that kernel has completed (griddepcontrol.wait).
  g.pdl = true;
  g.swizzle = static_cast<int>(swizzle);
  g.a_mn_major = amn || amn_x;
  g.k_a = static_cast<int>(K);
  g.b_kperm16 = amn;
  g.b_mn_major = x_b_mn;
  g.n_b = static_cast<int>(N);

  const size_t ws_bytes = kfgemm::gemm_workspace_size(v, g);
  Tensor ws;
  if (ws_bytes > 0) ws = at::empty({static_cast<int64_t>(ws_bytes)}, a.options().dtype(at::kByte));
  // Cleared before the preparation launch, so that the GEMM still follows that launch
  // directly (its programmatic dependent).
  const size_t zeroed = ws_bytes > 0 ? kfgemm::gemm_workspace_zeroed_bytes(v, g) : 0;
  if (zeroed > 0) {
    check_status(cudaMemsetAsync(ws.data_ptr(), 0, zeroed, stream) == cudaSuccess
                     ? kfgemm::Status::kOk
                     : kfgemm::Status::kLaunchFailed,
                 "workspace clear", "cudaMemsetAsync");
  }
  if (njobs + nscales > 0) {
    check_status(kfgemm::prep_operands(jobs, njobs, scale_jobs, nscales, stream),
                 "operand preparation", "launch");
  }
  const char* why = nullptr;
  check_status(kfgemm::gemm_run(v, g, ws_bytes ? ws.data_ptr() : nullptr, stream, &why),
               kfgemm::variant_name(v), why);
  if (!out_direct) out.copy_(dst.narrow(1, 0, N));
}

}  // namespace

void gemm_nt_out(Tensor& out, const Tensor& a, const Tensor& b, const Tensor& a_scale,
                 const Tensor& b_scale, bool exact, int64_t variant, int64_t splits,
                 int64_t swizzle) {
  check_nt(&out, a, b, a_scale, b_scale);
  run_nt(out, a, b, a_scale, b_scale, exact, variant, splits, swizzle);
}

Tensor gemm_nt(const Tensor& a, const Tensor& b, const Tensor& a_scale, const Tensor& b_scale,
               bool exact, int64_t variant, int64_t splits, int64_t swizzle) {
  const auto [M, N, K] = check_nt(nullptr, a, b, a_scale, b_scale);
  (void)K;
  Tensor out = at::empty({M, N}, a.options().dtype(at::kBFloat16));
  run_nt(out, a, b, a_scale, b_scale, exact, variant, splits, swizzle);
  return out;
}

void gemm(Tensor& out, const Tensor& a, const Tensor& b, const Tensor& a_scale,
          const Tensor& b_scale) {
  check_tensor_2d(a, "a");
  check_tensor_2d(b, "b");
  check_tensor_2d(a_scale, "a_scale");
  check_tensor_2d(b_scale, "b_scale");
  // The shapes in this convention: check_nt below sees the transposes and would word
  // a mismatch in theirs.
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  TORCH_CHECK_VALUE(b.size(0) == K, cat("b must have shape (K, N) with K = a.shape[1] = ", K, ", got ", shape_str(b)));
  const int64_t KB = ceil_div(K, kBlock), NB = ceil_div(N, kBlock);
  TORCH_CHECK_VALUE(a_scale.size(0) == KB && a_scale.size(1) == M, cat("a_scale must have shape (", KB, ", ", M, ") (ceil(K/128), M), got ", shape_str(a_scale)));
  TORCH_CHECK_VALUE(b_scale.size(0) == KB && b_scale.size(1) == NB, cat("b_scale must have shape (", KB, ", ", NB, ") (ceil(K/128), ceil(N/128)), got ", shape_str(b_scale)));
  Tensor bt = b.t(), sat = a_scale.t(), sbt = b_scale.t();
  check_nt(&out, a, bt, sat, sbt);
  run_nt(out, a, bt, sat, sbt, false, -1, -1, 0);
}

std::tuple<int64_t, int64_t, std::string> plan_nt(const Tensor& a, const Tensor& b,
                                                  const Tensor& a_scale, const Tensor& b_scale,
                                                  bool exact) {
  const auto [M, N, K] = check_nt(nullptr, a, b, a_scale, b_scale);
  if (M == 0 || N == 0 || K == 0) return {-1, 0, "none"};  // nothing to multiply
  const DeviceInfo props = hopper_info(a.get_device());
  const Choice c = pick_variant(M, N, K, traits_of(a, b, a_scale, b_scale, M, N, exact),
                                props.sm_count, props.mem_gbs);
  return {static_cast<int64_t>(c.variant), c.splits, kfgemm::variant_name(c.variant)};
}

namespace {

std::tuple<Tensor, Tensor> quantize_impl(const Tensor& x, bool fnuz, bool weight) {
  check_tensor_2d(x, "x");
  TORCH_CHECK_TYPE(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16, cat("x must be float32 or bfloat16, got ", x.scalar_type()));
  TORCH_CHECK_VALUE(x.is_cuda(), cat("x must be on a CUDA device, got ", x.device()));
  const int64_t R = x.size(0), C = x.size(1);
  // The 128x128 groups' launch grid holds at most 65535 row blocks.
  constexpr int64_t kWeightRows = 65535 * kBlock;
  TORCH_CHECK_VALUE(!weight || R <= kWeightRows, cat("x has ", R, " rows; quantize_weight takes at most ", kWeightRows, " (65535 blocks of 128); fix: quantize it in parts of at most that many rows"));
  const c10::cuda::CUDAGuard guard(x.device());
  // Built for sm_90a only, like the GEMM: elsewhere the launch finds no kernel image.
  (void)hopper_info(x.get_device());
  Tensor xc = (x.stride(1) == 1 && x.stride(0) >= x.size(1)) ? x : x.contiguous();
  const auto qtype = fnuz ? at::kFloat8_e4m3fnuz : at::kFloat8_e4m3fn;
  Tensor q = at::empty({R, C}, x.options().dtype(qtype));
  Tensor s = weight ? at::empty({ceil_div(R, kBlock), ceil_div(C, kBlock)}, x.options().dtype(at::kFloat))
                    : at::empty({R, ceil_div(C, kBlock)}, x.options().dtype(at::kFloat));
  if (R == 0 || C == 0) return {q, s};
  cudaStream_t stream = current_stream(x.get_device());
  const auto in = x.scalar_type() == at::kFloat ? kfgemm::QuantIn::kF32 : kfgemm::QuantIn::kBf16;
  const auto kind = fnuz ? kfgemm::Fp8Kind::kE4M3FNUZ : kfgemm::Fp8Kind::kE4M3FN;
  auto* qp = static_cast<uint8_t*>(q.data_ptr());
  const int64_t ldx = R == 1 ? C : xc.stride(0);
  const auto st = weight ? kfgemm::quantize_128x128(xc.data_ptr(), in, R, C, ldx, kind, qp,
                                                    s.data_ptr<float>(), stream)
                         : kfgemm::quantize_1x128(xc.data_ptr(), in, R, C, ldx, kind, qp,
                                                  s.data_ptr<float>(), stream);
  check_status(st, "quantization", "launch");
  return {q, s};
}

}  // namespace

std::tuple<Tensor, Tensor> quantize_1x128(const Tensor& x, bool fnuz) {
  return quantize_impl(x, fnuz, false);
}

std::tuple<Tensor, Tensor> quantize_128x128(const Tensor& x, bool fnuz) {
  return quantize_impl(x, fnuz, true);
}

Tensor prepare_operand(const Tensor& x, bool to_bf16) {
  check_tensor_2d(x, "x");
  TORCH_CHECK_TYPE(is_fp8(x), cat("x must be float8_e4m3fn or float8_e4m3fnuz, got ", x.scalar_type()));
  TORCH_CHECK_VALUE(x.is_cuda(), cat("x must be on a CUDA device, got ", x.device()));
  const c10::cuda::CUDAGuard guard(x.device());
  (void)hopper_info(x.get_device());
  const int64_t rows = x.size(0), K = x.size(1), Kp = round_up(K, 16);
  // FP8 output is e4m3fn whatever the input's kind (e4m3fnuz re-encoded).
  Tensor y = at::empty({rows, Kp}, x.options().dtype(to_bf16 ? at::kBFloat16 : at::kFloat8_e4m3fn));
  if (rows == 0 || K == 0) return y;
  kfgemm::OperandPrep job{};
  job.src = static_cast<const uint8_t*>(x.data_ptr());
  job.rows = rows;
  job.rows_out = rows;
  job.k = K;
  job.stride_row = x.stride(0);
  job.stride_k = x.stride(1);
  job.kind = kind_of(x);
  job.dst = y.data_ptr();
  job.ld = Kp;
  job.out = to_bf16 ? kfgemm::PrepOut::kBf16 : kfgemm::PrepOut::kFp8;
  check_status(kfgemm::prep_operands(&job, 1, current_stream(x.get_device())),
               "operand preparation", "launch");
  return y;
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def(
      "gemm_nt_out(Tensor(a!) out, Tensor a, Tensor b, Tensor a_scale, Tensor b_scale, "
      "bool exact=False, int variant=-1, int splits=-1, int swizzle=0) -> ()");
  ops.impl("gemm_nt_out", at::kCUDA, &gemm_nt_out);
  ops.def(
      "gemm_nt(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale, bool exact=False, "
      "int variant=-1, int splits=-1, int swizzle=0) -> Tensor");
  ops.impl("gemm_nt", at::kCUDA, &gemm_nt);
  ops.def("gemm(Tensor(a!) out, Tensor a, Tensor b, Tensor a_scale, Tensor b_scale) -> ()");
  ops.impl("gemm", at::kCUDA, &gemm);
  ops.def(
      "plan_nt(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale, bool exact=False) -> "
      "(int, int, str)");
  ops.impl("plan_nt", at::kCUDA, &plan_nt);
  ops.def("quantize_1x128(Tensor x, bool fnuz=False) -> (Tensor, Tensor)");
  ops.impl("quantize_1x128", at::kCUDA, &quantize_1x128);
  ops.def("quantize_128x128(Tensor x, bool fnuz=False) -> (Tensor, Tensor)");
  ops.impl("quantize_128x128", at::kCUDA, &quantize_128x128);
  ops.def("prepare_operand(Tensor x, bool to_bf16=False) -> Tensor");
  ops.impl("prepare_operand", at::kCUDA, &prepare_operand);
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
