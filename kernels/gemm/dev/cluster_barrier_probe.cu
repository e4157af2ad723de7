// Does compute-sanitizer racecheck see the ordering that a cluster mbarrier provides?
// A 2-CTA cluster; in each CTA warp 0 reads a shared buffer and then arrives on a
// barrier, warp 1 waits for the barrier's phase and then overwrites the buffer (a
// write-after-read ordered only by the barrier, as in a TMA pipeline's empty barrier).
//   probe<0>: local arrive (mbarrier.arrive.shared::cta), count 1
//   probe<1>: the same arrival through the cluster address of the own CTA
//             (mapa + mbarrier.arrive.release.cluster.shared::cluster), count 1
//   probe<2>: count 2, one arrival from the own CTA and one from the peer CTA, both
//             through cluster addresses (the multicast pipeline's pattern): ordered
//   probe<3>: count 1, only the peer CTA arrives: the local read is NOT ordered before
//             the write (a real race, the control)
// Run under `compute-sanitizer --tool racecheck`; the kernel names in the report say which
// patterns it flags.
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

namespace cg = cooperative_groups;

__device__ __forceinline__ uint32_t saddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void arrive_local(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(saddr(b)) : "memory");
}
__device__ __forceinline__ void arrive_cluster(uint64_t* b, uint32_t cta) {
  asm volatile(
      "{\n .reg .b32 ra;\n mapa.shared::cluster.u32 ra, %0, %1;\n"
      " mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}" ::"r"(saddr(b)),
      "r"(cta)
      : "memory");
}
__device__ __forceinline__ void wait_phase0(uint64_t* b) {
  asm volatile(
      "{\n .reg .pred p;\n WAIT:\n"
      " mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], 0;\n"
      " @!p bra WAIT;\n}" ::"r"(saddr(b))
      : "memory");
}

template <int kMode>
__global__ void __cluster_dims__(2, 1, 1) probe(int* out) {
  __shared__ int buf[32];
  __shared__ __align__(8) uint64_t bar;
  cg::cluster_group cluster = cg::this_cluster();
  const uint32_t rank = cluster.block_rank();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(saddr(&bar)), "r"(kMode == 2 ? 2 : 1));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (warp == 0) buf[lane] = lane;
  cluster.sync();
  if (warp == 0) {
    out[blockIdx.x * 32 + lane] = buf[lane];
    __syncwarp();
    if (lane == 0) {
      if (kMode == 0) arrive_local(&bar);
      if (kMode == 1) arrive_cluster(&bar, rank);
      if (kMode == 2) {
        arrive_cluster(&bar, rank);
        arrive_cluster(&bar, rank ^ 1);
      }
      if (kMode == 3) arrive_cluster(&bar, rank ^ 1);
    }
  } else {
    wait_phase0(&bar);
    buf[lane] = 100 + lane;
  }
  cluster.sync();  // no CTA exits while its peer may still arrive on its barrier
}

int main() {
  int* out;
  cudaMalloc(&out, 64 * sizeof(int));
  probe<0><<<2, 64>>>(out);
  cudaDeviceSynchronize();
  probe<1><<<2, 64>>>(out);
  cudaDeviceSynchronize();
  probe<2><<<2, 64>>>(out);
  cudaDeviceSynchronize();
  probe<3><<<2, 64>>>(out);
  const cudaError_t err = cudaDeviceSynchronize();
  printf("probes done: %s\n", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}
