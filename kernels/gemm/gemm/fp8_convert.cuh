// Exact FP8 -> BF16 conversion and round-to-nearest-even float -> FP8 encoding for
// both e4m3 flavours.
//
// e4m3fnuz shares e4m3fn's bit layout with an exponent bias one larger, so for every
// pattern that is finite in both, value_fnuz(bits) = value_fn(bits) / 2. The patterns
// that differ: 0x80 is NaN in fnuz (negative zero in fn), and 0x7F / 0xFF are +-240 in
// fnuz (NaN in fn).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "gemm_api.h"

namespace kfgemm::fp8 {

// Two FP8 bytes (low byte first) -> two floats, exactly.
template <Fp8Kind kKind>
__device__ __forceinline__ float2 decode2(uint16_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
  float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  if constexpr (kKind == Fp8Kind::kE4M3FNUZ) {
    f.x *= 0.5f;
    f.y *= 0.5f;
    const uint32_t lo = two & 0xFFu, hi = two >> 8;
    if (lo == 0x80u) f.x = __int_as_float(0x7FC00000);
    if (hi == 0x80u) f.y = __int_as_float(0x7FC00000);
    if ((lo & 0x7Fu) == 0x7Fu) f.x = (lo & 0x80u) ? -240.0f : 240.0f;
    if ((hi & 0x7Fu) == 0x7Fu) f.y = (hi & 0x80u) ? -240.0f : 240.0f;
  }
  return f;
}

// Four FP8 bytes of a word -> four bfloat16 (as two packed words), exactly.
template <Fp8Kind kKind>
__device__ __forceinline__ uint2 word_to_bf16x4(uint32_t w) {
  const float2 a = decode2<kKind>(static_cast<uint16_t>(w & 0xFFFFu));
  const float2 b = decode2<kKind>(static_cast<uint16_t>(w >> 16));
  const __nv_bfloat162 lo = __floats2bfloat162_rn(a.x, a.y);
  const __nv_bfloat162 hi = __floats2bfloat162_rn(b.x, b.y);
  uint2 r;
  r.x = *reinterpret_cast<const uint32_t*>(&lo);
  r.y = *reinterpret_cast<const uint32_t*>(&hi);
  return r;
}

// Round-to-nearest-even encoding of a float already clamped to the format's range.
template <Fp8Kind kKind>
__device__ __forceinline__ uint8_t encode(float y) {
  if constexpr (kKind == Fp8Kind::kE4M3FN) {
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(y, __NV_SATFINITE, __NV_E4M3));
  } else {
    // fnuz(a) has the bits of fn(2a) for 2a <= 448; above that the only fnuz values
    // are 224 (0x7E) and 240 (0x7F), with 232 the tie that rounds to the even 224.
    if (y != y) return 0x80u;
    const float a = fabsf(y);
    uint32_t bits;
    if (a > 232.0f) {
      bits = 0x7Fu;
    } else {
      bits = static_cast<uint32_t>(__nv_cvt_float_to_fp8(2.0f * a, __NV_SATFINITE, __NV_E4M3)) & 0x7Fu;
    }
    if (bits == 0u) return 0u;  // fnuz has no negative zero: 0x80 is NaN
    return static_cast<uint8_t>(bits | (y < 0.0f ? 0x80u : 0u));
  }
}

template <Fp8Kind kKind>
__device__ __forceinline__ constexpr float max_finite() {
  return kKind == Fp8Kind::kE4M3FN ? 448.0f : 240.0f;
}

}  // namespace kfgemm::fp8
