// ReLU for CUDA tensors: out[i] = max(input[i], 0), NaN propagated like torch.relu.
// One grid-stride kernel templated over float64, float32, float16 and bfloat16.

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdint>

namespace {

constexpr int kThreadsPerBlock = 256;
// Enough blocks to fill any current GPU; the grid-stride loop covers the rest.
constexpr int64_t kMaxBlocks = 65535;

template <typename scalar_t>
__global__ void relu_kernel(scalar_t *__restrict__ out,
                            const scalar_t *__restrict__ input, int64_t n) {
  // Compared as float for half and bfloat16: with CUDA's own half operators enabled, as
  // kernel builders compile them, c10::Half < c10::Half would be ambiguous.
  using opmath_t = at::opmath_type<scalar_t>;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    const scalar_t x = input[i];
    // `x < 0` is false for NaN, so NaN passes through unchanged.
    out[i] = static_cast<opmath_t>(x) < opmath_t(0) ? scalar_t(0) : x;
  }
}

void check_args(at::Tensor const &out, at::Tensor const &input) {
  TORCH_CHECK(input.is_cuda(), "relu: input must be a CUDA tensor, got ",
              input.device());
  TORCH_CHECK(out.device() == input.device(), "relu: out is on ", out.device(),
              " but input is on ", input.device());
  TORCH_CHECK(out.sizes() == input.sizes(), "relu: out has shape ", out.sizes(),
              " but input has shape ", input.sizes());
  TORCH_CHECK(out.scalar_type() == input.scalar_type(), "relu: out has dtype ",
              out.scalar_type(), " but input has dtype ", input.scalar_type());
}

} // namespace

void relu(at::Tensor &out, at::Tensor const &input) {
  check_args(out, input);
  const int64_t n = input.numel();
  if (n == 0) {
    return;
  }
  const c10::cuda::CUDAGuard device_guard(input.device());
  const at::Tensor src = input.contiguous();
  // Work on a contiguous buffer; copy back when `out` is a strided view.
  at::Tensor dst = out.is_contiguous() ? out : at::empty_like(src);

  const int64_t blocks =
      std::min<int64_t>((n + kThreadsPerBlock - 1) / kThreadsPerBlock, kMaxBlocks);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();

  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::ScalarType::Half, at::ScalarType::BFloat16, src.scalar_type(), "relu_cuda",
      [&] {
        relu_kernel<scalar_t>
            <<<static_cast<unsigned int>(blocks), kThreadsPerBlock, 0, stream>>>(
                dst.data_ptr<scalar_t>(), src.data_ptr<scalar_t>(), n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });

  if (!out.is_contiguous()) {
    out.copy_(dst);
  }
}
