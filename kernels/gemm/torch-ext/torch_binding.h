#pragma once

#include <string>
#include <tuple>

// ATen's Tensor alone: <torch/torch.h> (the C++ frontend: autograd, nn, optim) would
// more than double the binding's compile time, paid again on every edit of the project.
#include <ATen/core/Tensor.h>

// Block-scaled FP8 GEMM, "NT" convention: a (M, K), b (N, K), a_scale (M, ceil(K/128)),
// b_scale (ceil(N/128), ceil(K/128)); out (M, N) bfloat16. Any strides; out's elements
// must not overlap, nor may its bytes meet an input's (ValueError otherwise).
// `exact` selects 16-bit (BF16 or FP16) tensor cores on exactly converted operands. `variant` (-1: pick),
// `splits` (-1: pick; stream-K variants: 0 heuristic, 1 data-parallel, > 1 split-K;
// split-K variants: K slices) and `swizzle` (the tile scheduler's maximum swizzle, 1, 2,
// 4 or 8; 0: CUTLASS's default, 1) override the kernel choice for tuning.
void gemm_nt_out(at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                 const at::Tensor& a_scale, const at::Tensor& b_scale, bool exact,
                 int64_t variant, int64_t splits, int64_t swizzle);
at::Tensor gemm_nt(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale,
                      const at::Tensor& b_scale, bool exact, int64_t variant, int64_t splits,
                      int64_t swizzle);

// The guide's convention: a (M, K), b (K, N), a_scale (KB, M), b_scale (KB, NB), fast mode.
void gemm(at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
          const at::Tensor& a_scale, const at::Tensor& b_scale);

// The kernel gemm_nt(a, b, a_scale, b_scale, exact) would launch for these inputs on
// their device, without launching it: (variant id, splits, variant name); (-1, 0, "none")
// when there is nothing to multiply (M, N or K zero).
std::tuple<int64_t, int64_t, std::string> plan_nt(const at::Tensor& a, const at::Tensor& b,
                                                  const at::Tensor& a_scale,
                                                  const at::Tensor& b_scale, bool exact);

// Per-1x128 (activation) and per-128x128 (weight) quantization of a float32 or
// bfloat16 matrix; returns (q, scale) with q contiguous and scale (M, KB) / (NB, KB).
std::tuple<at::Tensor, at::Tensor> quantize_1x128(const at::Tensor& x, bool fnuz);
std::tuple<at::Tensor, at::Tensor> quantize_128x128(const at::Tensor& x, bool fnuz);

// Operand preparation alone (benchmarks): the canonical K-major copy of a (rows, K) view.
at::Tensor prepare_operand(const at::Tensor& x, bool to_bf16);
