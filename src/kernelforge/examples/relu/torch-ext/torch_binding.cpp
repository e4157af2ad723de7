#include <torch/library.h>

#include "registration.h"
#include "torch_binding.h"

// The ops of this kernel. To add one: declare its function in torch_binding.h, define it
// in each backend's source, and give it an `ops.def` with its schema and an `ops.impl`
// per backend here; then call it from torch-ext/relu/__init__.py.
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  // Out-variant op: the caller allocates `out`, the kernel fills it.
  ops.def("relu(Tensor! out, Tensor input) -> ()");
  // The function's type picks ours where the C library has a function of that name
  // (exp, tanh, abs, ...).
  using relu_fn = void (*)(at::Tensor &, at::Tensor const &);
  // Each backend's build defines one of these. A ROCm build of PyTorch dispatches AMD
  // GPU tensors under the CUDA key, so the same line serves a "rocm" kernel section
  // that compiles relu_cuda/relu_cuda.cu.
#if defined(CPU_KERNEL)
  ops.impl("relu", at::kCPU, static_cast<relu_fn>(&relu));
#elif defined(CUDA_KERNEL) || defined(ROCM_KERNEL)
  ops.impl("relu", at::kCUDA, static_cast<relu_fn>(&relu));
#endif
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
