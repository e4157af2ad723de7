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

#include "kernel_choice.h"
#include "registration.h"
#include "torch_binding.h"

#if __has_include("gemm_api.h")
#include "gemm_api.h"
#else
#include "../gemm/gemm_api.h"
#endif

namespace {

using at::Tensor;
using kfgemm_choice::Choice;
using kfgemm_choice::ceil_div;
using kfgemm_choice::pick_variant;
using kfgemm_choice::round_up;
using kfgemm_choice::split_for;
using kfgemm_choice::splits_fit;
using kfgemm_choice::Traits;

constexpr int64_t kBlock = 128;


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
  t.scales_rm = scales_row_major(sa) && scales_row_major(sb);
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
