// Standalone timing of operand preparation on the challenge shapes: the A (M, K) and
// B (K, N) operands stored MN-major, rewritten K-major, each alone and both in one launch,
// next to the driver's device-to-device copy of the same bytes (the bandwidth ceiling).
// Links the current prep.cu with one or two other builds of it (renamed namespaces and a
// C entry point from dev/prep_wrap.cu), timed side by side on the same device:
//
//   F="-O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Igemm"   # in kernels/gemm
//   nvcc $F -c gemm/prep.cu -Dkfgemm=kfgemm_ref -DKFGEMM_PREP_STAGES=3 -o ref_prep.o
//   nvcc $F -c dev/prep_wrap.cu -Dkfgemm=kfgemm_ref -DKFGEMM_WRAP_NAME=ref_prep_operands \
//        -o ref_wrap.o
//   nvcc $F dev/prep_bench.cu gemm/prep.cu ref_prep.o ref_wrap.o -o prep_bench
//
// With -DWITH_ALT a third build (kfgemm_alt / alt_prep_operands) is timed as well.
#include <cuda_runtime.h>
#include <stdio.h>

#include <math.h>

#include <algorithm>
#include <vector>

#include "gemm_api.h"

// Reference builds, each wrapped as
//   extern "C" int NAME_prep_operands(const void* ops, int count, cudaStream_t stream)
// around its own copy of prep_operands (same structure layout). Build with -DWITH_ALT to
// time a second reference (alt_prep_operands) as well.
extern "C" int ref_prep_operands(const void* ops, int count, cudaStream_t stream);
namespace kfgemm_ref {
kfgemm::Status prep_operands(const kfgemm::OperandPrep* ops, int count, cudaStream_t stream) {
  return static_cast<kfgemm::Status>(ref_prep_operands(ops, count, stream));
}
}  // namespace kfgemm_ref
#ifdef WITH_ALT
extern "C" int alt_prep_operands(const void* ops, int count, cudaStream_t stream);
namespace kfgemm_alt {
kfgemm::Status prep_operands(const kfgemm::OperandPrep* ops, int count, cudaStream_t stream) {
  return static_cast<kfgemm::Status>(alt_prep_operands(ops, count, stream));
}
}  // namespace kfgemm_alt
#endif

using kfgemm::OperandPrep;
using Fn = kfgemm::Status (*)(const OperandPrep*, int, cudaStream_t);

// Median over 35 timed runs (after 5 warm-up runs) of `launch()`, with L2 evicted by a
// memset of `flush` before each.
template <class Launch>
static float median_us(Launch&& launch, void* flush, size_t flush_bytes) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> t;
  for (int i = 0; i < 40; ++i) {
    cudaMemsetAsync(flush, i, flush_bytes);  // evict L2
    cudaEventRecord(e0);
    launch();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (i >= 5) t.push_back(ms * 1000.f);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

static float time_us(Fn fn, const OperandPrep* ops, int count, void* flush, size_t flush_bytes) {
  return median_us([&] { fn(ops, count, 0); }, flush, flush_bytes);
}

// The same bytes moved by the driver's device-to-device copy (A and B, one call each):
// the practical bandwidth ceiling for a kernel that reads and writes every byte once.
static float memcpy_us(void* ao, const void* a, size_t na, void* bo, const void* b, size_t nb,
                       void* flush, size_t flush_bytes) {
  return median_us(
      [&] {
        cudaMemcpyAsync(ao, a, na, cudaMemcpyDeviceToDevice, 0);
        cudaMemcpyAsync(bo, b, nb, cudaMemcpyDeviceToDevice, 0);
      },
      flush, flush_bytes);
}

int main() {
  const int shapes[][3] = {{1024, 1536, 7168}, {1024, 3072, 1536}, {1024, 576, 7168}, {1024, 7168, 256},
                           {1024, 7168, 2048}, {1024, 4608, 7168}, {1024, 7168, 2304}, {1024, 512, 7168},
                           {1024, 4096, 512},  {6144, 1536, 7168}, {6144, 3072, 1536}, {6144, 576, 7168},
                           {6144, 7168, 256},  {6144, 7168, 2048}, {6144, 4608, 7168}, {6144, 7168, 2304},
                           {6144, 512, 7168},  {6144, 4096, 512}};
  const size_t flush_bytes = size_t(512) << 20;
  void* flush;
  cudaMalloc(&flush, flush_bytes);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  printf("| M | N | K | ref A+B alone us | new A+B alone us | ref TB/s | new TB/s | ref one launch us | new one launch us | ref TB/s | new TB/s |\n");
  printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  double g[4] = {0, 0, 0, 0};
  double g_copy = 0;
#ifdef WITH_ALT
  double g_alt = 0;
#endif
  const int n_shapes = sizeof(shapes) / sizeof(shapes[0]);
  for (const auto& s : shapes) {
    const long m = s[0], n = s[1], k = s[2];
    const long kp = (k + 15) / 16 * 16;
    uint8_t *a, *b, *ao, *bo;
    cudaMalloc(&a, m * k);
    cudaMalloc(&b, n * k);
    cudaMalloc(&ao, m * kp);
    cudaMalloc(&bo, n * kp);
    cudaMemset(a, 0x38, m * k);
    cudaMemset(b, 0x38, n * k);
    OperandPrep ops[2];
    // A: (M, K) with stride (1, M): MN-major. B: (N, K) with stride (1, N).
    ops[0] = OperandPrep{a, m, m, k, 1, m, kfgemm::Fp8Kind::kE4M3FN, ao, kp, kfgemm::PrepOut::kFp8};
    ops[1] = OperandPrep{b, n, n, k, 1, n, kfgemm::Fp8Kind::kE4M3FN, bo, kp, kfgemm::PrepOut::kFp8};
    const double bytes = 2.0 * (m * k + n * k);
    float r[4];
    r[0] = time_us(&kfgemm_ref::prep_operands, &ops[0], 1, flush, flush_bytes) +
           time_us(&kfgemm_ref::prep_operands, &ops[1], 1, flush, flush_bytes);
    r[1] = time_us(&kfgemm::prep_operands, &ops[0], 1, flush, flush_bytes) +
           time_us(&kfgemm::prep_operands, &ops[1], 1, flush, flush_bytes);
    r[2] = time_us(&kfgemm_ref::prep_operands, ops, 2, flush, flush_bytes);
    r[3] = time_us(&kfgemm::prep_operands, ops, 2, flush, flush_bytes);
    // Same bytes out of both versions.
    const float copy = memcpy_us(ao, a, m * k, bo, b, n * k, flush, flush_bytes);
    printf("memcpy: %ld x %ld x %ld %.1f us (%.2f TB/s)\n", m, n, k, copy, bytes / (copy * 1e6));
    g_copy += log(copy);
    std::vector<uint8_t> h0(m * kp), h1(m * kp);
    cudaMemset(ao, 0, m * kp);
    kfgemm_ref::prep_operands(ops, 1, 0);
    cudaMemcpy(h0.data(), ao, m * kp, cudaMemcpyDeviceToHost);
    cudaMemset(ao, 0, m * kp);
    kfgemm::prep_operands(ops, 1, 0);
    cudaMemcpy(h1.data(), ao, m * kp, cudaMemcpyDeviceToHost);
    bool same = h0 == h1;
#ifdef WITH_ALT
    const float alt_alone = time_us(&kfgemm_alt::prep_operands, &ops[0], 1, flush, flush_bytes) +
                            time_us(&kfgemm_alt::prep_operands, &ops[1], 1, flush, flush_bytes);
    const float alt_one = time_us(&kfgemm_alt::prep_operands, ops, 2, flush, flush_bytes);
    printf("alt: %ld x %ld x %ld alone %.1f us (%.2f TB/s), one launch %.1f us (%.2f TB/s)\n", m, n, k,
           alt_alone, bytes / (alt_alone * 1e6), alt_one, bytes / (alt_one * 1e6));
    cudaMemset(ao, 0, m * kp);
    kfgemm_alt::prep_operands(ops, 1, 0);
    cudaMemcpy(h1.data(), ao, m * kp, cudaMemcpyDeviceToHost);
    same = same && h0 == h1;
    g_alt += log(alt_one);
#endif
    printf("| %ld | %ld | %ld | %.1f | %.1f | %.2f | %.2f | %.1f | %.1f | %.2f | %.2f |%s\n", m, n, k, r[0], r[1],
           bytes / (r[0] * 1e6), bytes / (r[1] * 1e6), r[2], r[3], bytes / (r[2] * 1e6), bytes / (r[3] * 1e6),
           same ? "" : " OUTPUT DIFFERS");
    for (int i = 0; i < 4; ++i) g[i] += log(r[i]);
    cudaFree(a);
    cudaFree(b);
    cudaFree(ao);
    cudaFree(bo);
  }
  printf("geomean us: ref alone %.1f, new alone %.1f, ref one launch %.1f, new one launch %.1f\n",
         exp(g[0] / n_shapes), exp(g[1] / n_shapes), exp(g[2] / n_shapes), exp(g[3] / n_shapes));
#ifdef WITH_ALT
  printf("geomean one launch: alt %.2f new %.2f\n", exp(g_alt / n_shapes), exp(g[3] / n_shapes));
#endif
  printf("geomean us: device-to-device memcpy of the same bytes %.2f\n", exp(g_copy / n_shapes));
  const cudaError_t err = cudaDeviceSynchronize();
  printf("status: %s\n", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}
