// ReLU for CPU tensors: out[i] = max(input[i], 0), NaN propagated like torch.relu.
// Handles float64, float32, float16 and bfloat16; the element loop is split over
// threads with at::parallel_for.

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>

#include <cstdint>

namespace {

// Elements per task: below this, threading costs more than it saves.
constexpr int64_t kGrainSize = 32768;

template <typename scalar_t>
void relu_range(scalar_t *__restrict__ out, const scalar_t *__restrict__ input,
                int64_t begin, int64_t end) {
  const scalar_t zero(0);
  for (int64_t i = begin; i < end; ++i) {
    const scalar_t x = input[i];
    // `x < 0` is false for NaN, so NaN passes through unchanged.
    out[i] = x < zero ? zero : x;
  }
}

void check_args(at::Tensor const &out, at::Tensor const &input) {
  TORCH_CHECK(input.device().is_cpu(), "relu: input must be a CPU tensor, got ",
              input.device());
  TORCH_CHECK(out.device().is_cpu(), "relu: out must be a CPU tensor, got ",
              out.device());
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
  const at::Tensor src = input.contiguous();
  // Work on a contiguous buffer; copy back when `out` is a strided view.
  at::Tensor dst = out.is_contiguous() ? out : at::empty_like(src);

  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::ScalarType::Half, at::ScalarType::BFloat16, src.scalar_type(), "relu_cpu",
      [&] {
        const scalar_t *in_ptr = src.data_ptr<scalar_t>();
        scalar_t *out_ptr = dst.data_ptr<scalar_t>();
        at::parallel_for(0, n, kGrainSize, [&](int64_t begin, int64_t end) {
          relu_range<scalar_t>(out_ptr, in_ptr, begin, end);
        });
      });

  if (!out.is_contiguous()) {
    out.copy_(dst);
  }
}
