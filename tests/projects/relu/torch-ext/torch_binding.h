#pragma once

#include <torch/torch.h>

// Writes max(input, 0) into `out`. One definition per backend build: the CPU
// build links relu_cpu/relu_cpu.cpp, the CUDA build relu_cuda/relu_cuda.cu.
void relu(torch::Tensor &out, torch::Tensor const &input);
