// BF16 operands (exactly converted FP8), ping-pong 64x128x128 tiles, K split into slices
// run as the batch mode (FP32 partials, summed by a second kernel).
// Kernels wait for the previous grid before their first read (dependent launch).
#define CUTLASS_ENABLE_GDC_FOR_SM90
#include "sm90_blockwise_gemm.cuh"
KFGEMM_DEFINE_VARIANT(bf16_pingpong_64x128_splitk, cutlass::bfloat16_t,
                      cute::Shape<cute::_64, cute::_128, cute::_128>,
                      cute::Shape<cute::_1, cute::_1, cute::_1>, false, false, true)
