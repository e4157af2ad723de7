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

// Four e4m3fnuz bytes of a word re-encoded as the e4m3fn bytes of the same values, in
// SIMD within the word (no carries cross bytes). Every fnuz magnitude from 2^-6 up (all
// but the 15 smallest) is an e4m3fn value, one exponent step down: the bits minus 8.
// Below, fnuz counts q * 2^-10 (q < 16) and fn q' * 2^-9, so q' = q / 2 rounded to
// nearest even: magnitudes below 2^-6 lose their last bit, as any float -> e4m3fn
// conversion would. +-240 (0x7F / 0xFF) become 0x77 / 0xF7; NaN (0x80) becomes 0xFF.
// Equal, byte for byte, to torch's float8_e4m3fnuz -> float -> float8_e4m3fn casts.
__device__ __forceinline__ uint32_t fnuz_to_fn4(uint32_t w) {
  const uint32_t sign = w & 0x80808080u;
  const uint32_t q = w & 0x7F7F7F7Fu;
  const uint32_t big = (q + 0x70707070u) & 0x80808080u;  // q >= 16
  const uint32_t big7 = big - (big >> 7);                 // 0x7F in those bytes
  const uint32_t down = (w | 0x80808080u) - 0x08080808u;  // q - 8, no borrows out
  const uint32_t half = ((q + ((w >> 1) & 0x01010101u)) >> 1) & 0x7F7F7F7Fu;
  const uint32_t mag = (down & big7) | (half & ~big7);
  const uint32_t nan = sign & ~((q + 0x7F7F7F7Fu) & 0x80808080u);  // sign set, q == 0
  return sign | mag | (nan - (nan >> 7));
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
