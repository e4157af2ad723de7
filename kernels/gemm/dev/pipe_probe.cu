// Throughput of the instructions in exact mode's conversion loop, alone and mixed: does
// the FP8 -> FP16 conversion (cvt.rn.f16x2.e4m3x2, SASS F2FP.F16.E4M3.UNPACK_B) share a
// pipe with the shared-memory loads and stores around it?
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/pipe_probe dev/pipe_probe.cu
//   /tmp/pipe_probe
// Every thread runs independent chains, 16 warps per SM; each kernel prints its
// instructions per clock per SM (thread instructions, summed over the SM's warps), from
// the SM cycle counter. If two kinds share a pipe, a loop mixing them takes the sum of
// their times; if not, about the longer one.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

constexpr int kThreads = 256, kBlocksPerSm = 2, kIters = 2048, kChains = 8;

__device__ __forceinline__ uint32_t cvt_lo(uint32_t w) {
  uint32_t r;
  asm volatile("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, lo;\n}"
               : "=r"(r) : "r"(w));
  return r;
}
__device__ __forceinline__ uint32_t cvt_hi(uint32_t w) {
  uint32_t r;
  asm volatile("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, hi;\n}"
               : "=r"(r) : "r"(w));
  return r;
}
__device__ __forceinline__ uint4 lds(uint32_t a) {
  uint4 v;
  // volatile: ptxas hoists plain shared loads out of a loop that never stores to them
  asm volatile("ld.volatile.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a) : "memory");
  return v;
}
__device__ __forceinline__ void sts(uint32_t a, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w) : "memory");
}
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b) {
  uint32_t r;
  asm volatile("prmt.b32 %0, %1, %2, 0x5140;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

// kMode: 0 conversions, 1 16-byte shared loads, 2 16-byte shared stores, 3 PRMT,
// 4 the conversion loop's mix per chain and iteration (1 load, 8 conversions, 2 stores),
// 5 loads and stores only in that ratio, 6 conversions and loads (1:8).
template <int kMode>
__global__ void __launch_bounds__(kThreads) probe(uint32_t seed, uint32_t* sink, long long* cycles) {
  // Two halves of 16 KB: chain c of a thread uses 16 bytes at (c % 4, tid) of a half,
  // loads read one half and stores write the other (conflict-free, consecutive threads).
  constexpr uint32_t kHalf = 4 * kThreads * 16;
  __shared__ __align__(16) uint32_t buf[2 * kHalf / 4];
  const int tid = threadIdx.x;
  for (int i = tid; i < 2 * kHalf / 4; i += kThreads) buf[i] = seed * (i + 1);
  __syncthreads();
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(buf));
  uint32_t v[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) v[c] = seed ^ (tid * 8 + c);
  const long long t0 = clock64();
  for (int it = 0; it < kIters; ++it) {
    const uint32_t off = (it & 1) * kHalf;
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      const uint32_t a = base + ((c % 4) * kThreads + tid) * 16;
      if constexpr (kMode == 0) {
#pragma unroll
        for (int j = 0; j < 8; ++j) v[c] = cvt_lo(v[c]);
      } else if constexpr (kMode == 1) {
        const uint4 x = lds(a + off);
        v[c] ^= x.x ^ x.y ^ x.z ^ x.w;
      } else if constexpr (kMode == 2) {
        sts(a + off, make_uint4(v[c], v[c] + 1, v[c] + 2, v[c] + 3));
        v[c] += 7;
      } else if constexpr (kMode == 3) {
#pragma unroll
        for (int j = 0; j < 8; ++j) v[c] = prmt(v[c], v[(c + 1) % kChains]);
      } else if constexpr (kMode == 4 || kMode == 6) {
        const uint4 x = lds(a + off);
        const uint32_t x0 = x.x ^ v[c];
        const uint32_t y0 = cvt_lo(x0), y1 = cvt_hi(x0), y2 = cvt_lo(x.y), y3 = cvt_hi(x.y),
                       y4 = cvt_lo(x.z), y5 = cvt_hi(x.z), y6 = cvt_lo(x.w), y7 = cvt_hi(x.w);
        if constexpr (kMode == 4) {
          sts(a + (off ^ kHalf), make_uint4(y0, y1, y2, y3));
          sts(a + (off ^ kHalf), make_uint4(y4, y5, y6, y7));
        }
        v[c] ^= y0 ^ y1 ^ y2 ^ y3 ^ y4 ^ y5 ^ y6 ^ y7;
      } else if constexpr (kMode == 5) {
        const uint4 x = lds(a + off);
        sts(a + (off ^ kHalf), make_uint4(x.x ^ v[c], x.y, x.z, x.w));
        sts(a + (off ^ kHalf), make_uint4(x.w, x.z ^ v[c], x.y, x.x));
        v[c] ^= x.x;
      }
    }
  }
  const long long t1 = clock64();
  uint32_t acc = 0;
#pragma unroll
  for (int c = 0; c < kChains; ++c) acc ^= v[c];
  if (acc == 0x12345678u) sink[blockIdx.x * kThreads + tid] = acc;  // keeps the loop
  if (tid == 0) cycles[blockIdx.x] = t1 - t0;
}

template <int kMode>
void run(const char* name, double per_iter_chain, int sms, uint32_t* sink, long long* cycles) {
  const int blocks = sms * kBlocksPerSm;
  probe<kMode><<<blocks, kThreads>>>(0x9E3779B9u, sink, cycles);  // warm-up
  probe<kMode><<<blocks, kThreads>>>(0x9E3779B9u, sink, cycles);
  cudaDeviceSynchronize();
  long long host[4096];
  cudaMemcpy(host, cycles, blocks * sizeof(long long), cudaMemcpyDeviceToHost);
  double mean = 0;
  for (int i = 0; i < blocks; ++i) mean += static_cast<double>(host[i]) / blocks;
  const double per_sm = kBlocksPerSm * kThreads * static_cast<double>(kIters) * kChains * per_iter_chain;
  printf("%-44s %8.1f cycles/iteration  %6.1f thread-instructions/clk/SM\n", name,
         mean / kIters, per_sm / mean);
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  printf("%s, %d SMs, %d warps per SM\n", prop.name, sms, kBlocksPerSm * kThreads / 32);
  uint32_t* sink;
  long long* cycles;
  cudaMalloc(&sink, 1 << 24);
  cudaMalloc(&cycles, 4096 * sizeof(long long));
  run<0>("cvt.rn.f16x2.e4m3x2 (8 per chain)", 8, sms, sink, cycles);
  run<3>("prmt (8 per chain)", 8, sms, sink, cycles);
  run<1>("ld.shared.v4 (1 per chain)", 1, sms, sink, cycles);
  run<2>("st.shared.v4 (1 per chain)", 1, sms, sink, cycles);
  run<5>("1 ld.shared.v4 + 2 st.shared.v4", 3, sms, sink, cycles);
  run<6>("1 ld.shared.v4 + 8 cvt", 9, sms, sink, cycles);
  run<4>("1 ld.shared.v4 + 8 cvt + 2 st.shared.v4", 11, sms, sink, cycles);
  const cudaError_t e = cudaGetLastError();
  printf("%s\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
