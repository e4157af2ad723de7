#pragma once

// ATen's Tensor alone: <torch/torch.h> (the C++ frontend: autograd, nn, optim) would
// make every file that includes this header take several times longer to compile.
#include <ATen/core/Tensor.h>

// Writes max(input, 0) into `out`. One definition per backend build: the CPU
// build links relu_cpu/relu_cpu.cpp, the CUDA (and ROCm) build relu_cuda/relu_cuda.cu.
// A second op is declared here too, and defined in the same sources.
void relu(at::Tensor &out, at::Tensor const &input);
