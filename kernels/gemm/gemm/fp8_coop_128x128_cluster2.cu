// FP8 (e4m3fn) operands, cooperative 128x128x128 tiles in 2x1 clusters (the B tile is
// multicast to both CTAs), persistent data-parallel scheduling.
// Kernels wait for the previous grid before their first read (dependent launch).
#define CUTLASS_ENABLE_GDC_FOR_SM90
#include "sm90_blockwise_gemm.cuh"
KFGEMM_DEFINE_VARIANT(fp8_coop_128x128_cluster2, cutlass::float_e4m3_t,
                      cute::Shape<cute::_128, cute::_128, cute::_128>,
                      cute::Shape<cute::_2, cute::_1, cute::_1>, true, false)
