// Block quantization into FP8 with float32 scales, matching the package's pure-torch
// reference bit for bit:
//   amax = max(|x| over the group, 1e-4);  s = amax / fp8_max;  q = fp8(clamp(x / s))
// with IEEE division and round-to-nearest-even encoding. Groups are 1x128 (one row,
// 128 columns; activations) or 128x128 (weights). Columns past the end count as 0.
// Non-finite input follows torch too: max, the 1e-4 floor and the clamp keep NaN
// (torch's amax and clamp; fmaxf / fminf would drop it), so a NaN makes its group's
// scale and every code in the group NaN; an infinity makes the scale inf, the group's
// finite values 0 and the infinity itself NaN (inf / inf). A NaN code is the bytes of
// torch's cast: 0x7F with the float's sign for e4m3fn, 0x80 for e4m3fnuz.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "fp8_convert.cuh"
#include "gemm_api.h"

namespace kfgemm {
namespace {

constexpr float kAmaxFloor = 1e-4f;

// max(a, b) that returns NaN when either is NaN (torch's max; fmaxf returns the other).
__device__ __forceinline__ float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }

// torch.clamp(y, -m, m): NaN stays NaN (fminf / fmaxf would turn it into -m).
__device__ __forceinline__ float clamp_keep_nan(float y, float m) {
  return y > m ? m : (y < -m ? -m : y);
}

// The group's scale: torch's amax.clamp(min=1e-4) / fp8_max, NaN and inf kept.
__device__ __forceinline__ float group_scale(float amax, float fmax) {
  return (amax < kAmaxFloor ? kAmaxFloor : amax) / fmax;
}

// The code of a clamped quotient; a NaN one as torch's float -> FP8 cast writes it.
template <Fp8Kind kKind>
__device__ __forceinline__ uint8_t quant_code(float y) {
  if constexpr (kKind == Fp8Kind::kE4M3FN) {
    if (y != y) return static_cast<uint8_t>(0x7Fu | ((__float_as_uint(y) >> 24) & 0x80u));
  }
  return fp8::encode<kKind>(y);  // e4m3fnuz: its NaN branch gives 0x80
}

template <QuantIn kIn>
__device__ __forceinline__ float load_x(const void* x, int64_t offset) {
  if constexpr (kIn == QuantIn::kF32) {
    return static_cast<const float*>(x)[offset];
  } else {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(x)[offset]);
  }
}

// One warp per 1x128 group: each lane holds 4 values.
template <QuantIn kIn, Fp8Kind kKind>
__global__ void __launch_bounds__(256) quant_1x128_kernel(const void* x, int64_t rows, int64_t cols,
                                                          int64_t ldx, uint8_t* q, float* scale) {
  const int64_t groups = (cols + 127) / 128;
  const int64_t gid = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (gid >= rows * groups) return;
  const int64_t r = gid / groups;
  const int64_t c0 = (gid % groups) * 128;
  float v[4];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t c = c0 + lane + 32 * i;
    v[i] = c < cols ? load_x<kIn>(x, r * ldx + c) : 0.0f;
    amax = nan_max(amax, fabsf(v[i]));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) amax = nan_max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, off));
  const float fmax = fp8::max_finite<kKind>();
  const float s = group_scale(amax, fmax);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t c = c0 + lane + 32 * i;
    if (c < cols) {
      const float y = clamp_keep_nan(v[i] / s, fmax);
      q[r * cols + c] = quant_code<kKind>(y);
    }
  }
  if (lane == 0) scale[r * groups + gid % groups] = s;
}

// One block of 256 threads per 128x128 group.
template <QuantIn kIn, Fp8Kind kKind>
__global__ void __launch_bounds__(256) quant_128x128_kernel(const void* x, int64_t rows, int64_t cols,
                                                            int64_t ldx, uint8_t* q, float* scale) {
  __shared__ float red[8];
  const int64_t cgroups = (cols + 127) / 128;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * 128;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * 128;
  const int tid = threadIdx.x;
  const int col = tid & 127;
  const int row_off = tid >> 7;  // 0 or 1
  float amax = 0.0f;
  for (int i = row_off; i < 128; i += 2) {
    const int64_t r = r0 + i, c = c0 + col;
    if (r < rows && c < cols) amax = nan_max(amax, fabsf(load_x<kIn>(x, r * ldx + c)));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) amax = nan_max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, off));
  if ((tid & 31) == 0) red[tid >> 5] = amax;
  __syncthreads();
  amax = red[0];
#pragma unroll
  for (int w = 1; w < 8; ++w) amax = nan_max(amax, red[w]);
  const float fmax = fp8::max_finite<kKind>();
  const float s = group_scale(amax, fmax);
  for (int i = row_off; i < 128; i += 2) {
    const int64_t r = r0 + i, c = c0 + col;
    if (r < rows && c < cols) {
      const float y = clamp_keep_nan(load_x<kIn>(x, r * ldx + c) / s, fmax);
      q[r * cols + c] = quant_code<kKind>(y);
    }
  }
  if (tid == 0) scale[blockIdx.y * cgroups + blockIdx.x] = s;
}

}  // namespace

Status quantize_1x128(const void* x, QuantIn in, int64_t rows, int64_t cols, int64_t ldx,
                      Fp8Kind kind, uint8_t* q, float* scale, cudaStream_t stream) {
  if (rows < 1 || cols < 1) return Status::kOk;
  const int64_t warps = rows * ((cols + 127) / 128);
  const int64_t blocks = (warps * 32 + 255) / 256;
  if (blocks > 0x7FFFFFFFLL) return Status::kUnsupported;
  const dim3 grid(static_cast<unsigned>(blocks));
  const bool nuz = kind == Fp8Kind::kE4M3FNUZ;
  if (in == QuantIn::kF32) {
    if (nuz) quant_1x128_kernel<QuantIn::kF32, Fp8Kind::kE4M3FNUZ><<<grid, 256, 0, stream>>>(x, rows, cols, ldx, q, scale);
    else quant_1x128_kernel<QuantIn::kF32, Fp8Kind::kE4M3FN><<<grid, 256, 0, stream>>>(x, rows, cols, ldx, q, scale);
  } else {
    if (nuz) quant_1x128_kernel<QuantIn::kBf16, Fp8Kind::kE4M3FNUZ><<<grid, 256, 0, stream>>>(x, rows, cols, ldx, q, scale);
    else quant_1x128_kernel<QuantIn::kBf16, Fp8Kind::kE4M3FN><<<grid, 256, 0, stream>>>(x, rows, cols, ldx, q, scale);
  }
  return cudaPeekAtLastError() == cudaSuccess ? Status::kOk : Status::kLaunchFailed;
}

Status quantize_128x128(const void* x, QuantIn in, int64_t rows, int64_t cols, int64_t ldx,
                        Fp8Kind kind, uint8_t* q, float* scale, cudaStream_t stream) {
  if (rows < 1 || cols < 1) return Status::kOk;
  const int64_t gr = (rows + 127) / 128, gc = (cols + 127) / 128;
  if (gr > 65535 || gc > 0x7FFFFFFFLL) return Status::kUnsupported;
  const dim3 grid(static_cast<unsigned>(gc), static_cast<unsigned>(gr));
  const bool nuz = kind == Fp8Kind::kE4M3FNUZ;
  if (in == QuantIn::kF32) {
    if (nuz) quant_128x128_kernel<QuantIn::kF32, Fp8Kind::kE4M3FNUZ><<<grid, 256, 0, stream>>>(x, rows, cols, ldx, q, scale);
    else quant_128x128_kernel<QuantIn::kF32, Fp8Kind::kE4M3FN><<<grid, 256, 0, stream>>>(x, rows, cols, ldx, q, scale);
  } else {
    if (nuz) quant_128x128_kernel<QuantIn::kBf16, Fp8Kind::kE4M3FNUZ><<<grid, 256, 0, stream>>>(x, rows, cols, ldx, q, scale);
    else quant_128x128_kernel<QuantIn::kBf16, Fp8Kind::kE4M3FN><<<grid, 256, 0, stream>>>(x, rows, cols, ldx, q, scale);
  }
  return cudaPeekAtLastError() == cudaSuccess ? Status::kOk : Status::kLaunchFailed;
}

}  // namespace kfgemm
