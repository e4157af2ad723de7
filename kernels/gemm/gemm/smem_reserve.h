// Sets a kernel's dynamic shared-memory limit once per device, on the host.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kfgemm::sm90 {

// The limit is a per-device attribute of the function; `set_bits` holds one bit per
// device already done, so later calls skip the driver call (2-3 us on the host).
template <typename Kernel>
bool reserve_smem_once(Kernel kernel, int device, size_t bytes, uint64_t* set_bits) {
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t(1) << device : 0;
  if (bit && (__atomic_load_n(set_bits, __ATOMIC_ACQUIRE) & bit)) return true;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(bytes)) != cudaSuccess) {
    return false;
  }
  __atomic_fetch_or(set_bits, bit, __ATOMIC_RELEASE);
  return true;
}

}  // namespace kfgemm::sm90
