// Sum of split-K partial products into the bfloat16 output.
#include <cuda_bf16.h>

#include <cstdint>

#include "gemm_api.h"

namespace kfgemm {
namespace {

// One thread per 4 consecutive outputs of a row: a 16-byte load per slice and an
// 8-byte store. The slices are added in order, so the result does not depend on the
// launch configuration. Launched as a programmatic dependent of the GEMM that writes the
// partials: it starts while that grid drains and waits for its completion before reading.
__global__ void __launch_bounds__(256) reduce_splits_kernel(const float* __restrict__ partials,
                                                            int splits, int m, int n,
                                                            __nv_bfloat16* __restrict__ d,
                                                            int64_t ldd) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const int64_t quads_per_row = n / 4;
  const int64_t total = static_cast<int64_t>(m) * quads_per_row;
  const int64_t plane = static_cast<int64_t>(m) * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / quads_per_row;
    const int64_t col = (i - row * quads_per_row) * 4;
    const float* p = partials + row * n + col;
    float4 acc = __ldg(reinterpret_cast<const float4*>(p));
    for (int s = 1; s < splits; ++s) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(p + s * plane));
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
    __nv_bfloat162 lo = __floats2bfloat162_rn(acc.x, acc.y);
    __nv_bfloat162 hi = __floats2bfloat162_rn(acc.z, acc.w);
    uint2 packed;
    packed.x = *reinterpret_cast<uint32_t*>(&lo);
    packed.y = *reinterpret_cast<uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(d + row * ldd + col) = packed;
  }
}

}  // namespace

Status reduce_splits(const float* partials, int splits, int m, int n, void* d, int64_t ldd,
                     int sm_count, cudaStream_t stream) {
  if (splits < 1 || m < 0 || n % 4 != 0 || ldd % 4 != 0 ||
      reinterpret_cast<uintptr_t>(d) % 8 != 0 || reinterpret_cast<uintptr_t>(partials) % 16 != 0) {
    return Status::kUnsupported;
  }
  const int64_t total = static_cast<int64_t>(m) * (n / 4);
  if (total == 0) return Status::kOk;
  const int64_t sms = sm_count > 0 ? sm_count : 132;
  const int64_t want = (total + 255) / 256;
  const int blocks = static_cast<int>(want < sms * 8 ? want : sms * 8);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(256);
  config.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attr;
  config.numAttrs = 1;
  const cudaError_t err = cudaLaunchKernelEx(&config, reduce_splits_kernel, partials, splits, m, n,
                                             static_cast<__nv_bfloat16*>(d), ldd);
  return err == cudaSuccess ? Status::kOk : Status::kLaunchFailed;
}

}  // namespace kfgemm
