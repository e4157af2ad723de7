#include <torch/library.h>

#include "registration.h"
#include "torch_binding.h"

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  // Out-variant op: the caller allocates `out`, the kernel fills it.
  ops.def("relu(Tensor! out, Tensor input) -> ()");
  // The function's type picks ours where the C library has a function of that name
  // (exp, tanh, abs, ...).
  using relu_fn = void (*)(at::Tensor &, at::Tensor const &);
#if defined(CPU_KERNEL)
  ops.impl("relu", at::kCPU, static_cast<relu_fn>(&relu));
#elif defined(CUDA_KERNEL)
  ops.impl("relu", at::kCUDA, static_cast<relu_fn>(&relu));
#endif
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
