// Standalone timing of the followed preparation (prep_operands_follow) alone, on a
// challenge problem's operands stored MN-major, for several SM counts, next to the
// plain preparation launch. Build in kernels/gemm (CUTLASS's headers for sm90_ptx.cuh):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
//        -Igemm -I<cutlass>/include dev/follow_bench.cu -o follow_bench
// Arguments: M N K (default 1024 1536 7168).
#include "../gemm/prep.cu"

#include <stdio.h>

#include <algorithm>
#include <vector>

template <class Launch>
static float median_us(Launch&& launch, void* flush, size_t flush_bytes) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> t;
  for (int i = 0; i < 30; ++i) {
    cudaMemsetAsync(flush, i, flush_bytes);
    cudaEventRecord(e0);
    launch();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (i >= 5) t.push_back(ms * 1000.0f);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main(int argc, char** argv) {
  const int64_t m = argc > 1 ? atoll(argv[1]) : 1024, n = argc > 2 ? atoll(argv[2]) : 1536,
                k = argc > 3 ? atoll(argv[3]) : 7168;
  uint8_t *a, *b, *da, *db;
  uint32_t* ready;
  void* flush;
  const size_t flush_bytes = size_t(256) << 20;
  cudaMalloc(&a, m * k);
  cudaMalloc(&b, n * k);
  cudaMalloc(&da, m * k);
  cudaMalloc(&db, n * k);
  cudaMalloc(&ready, 4096);
  cudaMalloc(&flush, flush_bytes);
  cudaMemset(a, 1, m * k);
  cudaMemset(b, 2, n * k);
  using namespace kfgemm;
  OperandPrep ops[2] = {};
  ops[0] = {a, m, m, k, 1, m, Fp8Kind::kE4M3FN, da, k, PrepOut::kFp8, false};
  ops[1] = {b, n, n, k, 1, n, Fp8Kind::kE4M3FN, db, k, PrepOut::kFp8, false};
  const double bytes = 2.0 * (m + n) * k;
  const float plain = median_us([&] { prep_operands(ops, 2, nullptr, 0, 0); }, flush, flush_bytes);
  printf("%lldx%lldx%lld plain prep: %.1f us (%.2f TB/s)\n", (long long)m, (long long)n,
         (long long)k, plain, bytes / plain * 1e-6);
  for (int ctas : {8, 16, 24, 36, 52, 80, 132}) {
    const float t = median_us(
        [&] {
          cudaMemsetAsync(ready, 0, 4096, 0);
          prep_operands_follow(ops, 2, ready, ctas, 1, 0);
        },
        flush, flush_bytes);
    printf("follow on %3d SMs: %.1f us (%.2f TB/s, %.1f GB/s per SM)\n", ctas, t,
           bytes / t * 1e-6, bytes / t * 1e-3 / ctas);
  }
  printf("%s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
