// The driver's TMA descriptor encoder, looked up once per process.
//
// The extension links the CUDA runtime, not the driver library, so driver functions are
// reached through cudaGetDriverEntryPoint. CUTLASS does that lookup (a search by name)
// inside every descriptor it encodes, two to three per GEMM call. Including this header
// before any CUTLASS header routes CUTLASS's calls through pointers cached here instead.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include "cutlass/cuda_host_adapter.hpp"

namespace kfgemm::driver {

// The function `name` of the driver's CUDA 12.0 ABI, or nullptr when the driver lacks it.
inline void* entry_point(const char* name) {
  void* ptr = nullptr;
  cudaDriverEntryPointQueryResult res{};
#if CUDART_VERSION >= 12050
  const cudaError_t err = cudaGetDriverEntryPointByVersion(name, &ptr, 12000, cudaEnableDefault, &res);
#else
  const cudaError_t err = cudaGetDriverEntryPoint(name, &ptr, cudaEnableDefault, &res);
#endif
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear it: the caller's next cudaGetLastError is its own
    return nullptr;
  }
  return res == cudaDriverEntryPointSuccess ? ptr : nullptr;
}

using EncodeTiled = PFN_cuTensorMapEncodeTiled_v12000;

inline EncodeTiled encode_tiled() {
  static const EncodeTiled fn = reinterpret_cast<EncodeTiled>(entry_point("cuTensorMapEncodeTiled"));
  return fn;
}

// The first failure of an encode through the wrapper below on this thread since the
// caller last reset it. CUTLASS reports a failed encode only on stderr and launches the
// kernel anyway, with a descriptor that faults the context; its callers check this
// instead.
inline thread_local CUresult encode_error = CUDA_SUCCESS;

inline CUresult note_encode(CUresult r) {
  if (r != CUDA_SUCCESS && encode_error == CUDA_SUCCESS) encode_error = r;
  return r;
}

// Drop-in replacement for CUTLASS's per-call wrapper (same arguments and result). The
// GEMMs use tiled descriptors only; CUTLASS's im2col copies would need a wrapper too.
template <typename... Args>
CUresult cached_cuTensorMapEncodeTiled(Args... args) {
  const EncodeTiled fn = encode_tiled();
  return note_encode(fn ? fn(args...) : CUDA_ERROR_NOT_FOUND);
}

}  // namespace kfgemm::driver

#undef CUTLASS_CUDA_DRIVER_WRAPPER_CALL
#define CUTLASS_CUDA_DRIVER_WRAPPER_CALL(func) ::kfgemm::driver::cached_##func
