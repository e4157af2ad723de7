// Tensor-pipe throughput of FP8 wgmma with A from shared memory (SS) against A from
// registers (RS), at n = 128 and n = 64, with one or two warp groups per SM (the kernels
// have two consumer warp groups), each keeping two MMA groups in flight (two
// accumulators, wait<1>). Are the kernels that build A's fragments in registers
// (variants 13, 16, 20-23) slower because the RS form itself is?
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
//     -I<cutlass>/include -Igemm -o /tmp/wgmma_probe dev/wgmma_probe.cu && /tmp/wgmma_probe
// Prints FP8 MACs per clock per SM (dense peak: 4096) from the SM cycle counter; the
// operands are zeros (the data does not change the tensor pipe's time). FFMAs on the
// finished accumulator between groups, as a promotion does, made ptxas serialize the MMAs
// of this loop (C7514), so the probe has none.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "sm90_ptx.cuh"

using namespace kfgemm::sm90;

constexpr int kIters = 4096;

template <int N>
using SS = std::conditional_t<N == 128, cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_SS_TN<>,
                              cute::SM90::GMMA::MMA_64x64x32_F32E4M3E4M3_SS_TN<>>;
template <int N>
using RS = std::conditional_t<N == 128, cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_RS_TN<>,
                              cute::SM90::GMMA::MMA_64x64x32_F32E4M3E4M3_RS_TN<>>;

// Each warp group: kIters groups of four k32 MMAs (m64 x N), alternating between two
// accumulators, at most two groups in flight.
template <int N, bool kRs>
__global__ void __launch_bounds__(256, 1) probe(unsigned long long* cycles, float* sink) {
  extern __shared__ __align__(1024) uint8_t smem[];
  constexpr int kAcc = N / 2;  // floats per thread of an m64 x N accumulator
  const uint32_t base = (smem_u32(smem) + 1023) & ~1023u;
  const uint64_t da = smem_desc(base), db = smem_desc(base + 16384);
  uint32_t f[4] = {0, 0, 0, 0};
  // Every MMA accumulates, so that none of them is dead code to ptxas (which drops MMAs
  // whose results are overwritten unread).
  float t0[kAcc], t1[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) t0[i] = t1[i] = 0.0f;
  __syncthreads();
  const unsigned long long start = clock64();
  auto issue = [&](float(&t)[kAcc]) {
    fence_regs(t);
    cute::warpgroup_arrive();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      if constexpr (kRs) {
        mma_rs<RS<N>>(f[0], f[1], f[2], f[3], db + 2 * kk, t, true);
      } else {
        mma<SS<N>>(da + 2 * kk, db + 2 * kk, t, true);
      }
    }
    cute::warpgroup_commit_batch();
  };
  issue(t0);
  for (int it = 0; it < kIters; it += 2) {
    issue(t1);
    cute::warpgroup_wait<1>();
    fence_regs(t0);
    issue(t0);
    cute::warpgroup_wait<1>();
    fence_regs(t1);
  }
  cute::warpgroup_wait<0>();
  fence_regs(t0);
  const unsigned long long end = clock64();
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kAcc; ++i) s += t0[i] + t1[i];
  if (s == 1.0f) sink[threadIdx.x] = s;  // keeps the work
  if (threadIdx.x == 0) atomicMax(cycles, end - start);
}

// Prints one row of the table; false (with the error) if the probe did not run.
template <int N, bool kRs>
bool run(int groups, int sms) {
  unsigned long long* cycles;
  float* sink;
  cudaMalloc(&cycles, sizeof(unsigned long long));
  cudaMalloc(&sink, 256 * sizeof(float));
  auto kernel = probe<N, kRs>;
  const int smem = 32768 + 1024;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  for (int rep = 0; rep < 2; ++rep) {  // the first launch warms up
    cudaMemset(cycles, 0, sizeof(unsigned long long));
    kernel<<<sms, 128 * groups, smem>>>(cycles, sink);
  }
  unsigned long long c = 0;
  const cudaError_t err = cudaMemcpy(&c, cycles, sizeof(c), cudaMemcpyDeviceToHost);
  cudaFree(cycles);
  cudaFree(sink);
  if (err != cudaSuccess || c == 0) {
    printf("error: %s\n", cudaGetErrorString(err != cudaSuccess ? err : cudaGetLastError()));
    return false;
  }
  const double macs = double(groups) * (kIters + 1) * 4 * 64.0 * N * 32;
  printf("| %s m64n%dk32 | %d | %.0f |\n", kRs ? "RS" : "SS", N, groups, macs / double(c));
  return true;
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  printf("%s, %d SMs\n\n| wgmma | warp groups | MACs per clock per SM |\n|---|---|---|\n",
         prop.name, sms);
  for (int groups = 1; groups <= 2; ++groups) {
    if (!run<128, false>(groups, sms) || !run<128, true>(groups, sms) ||
        !run<64, false>(groups, sms) || !run<64, true>(groups, sms)) {
      return 1;
    }
  }
  return 0;
}
