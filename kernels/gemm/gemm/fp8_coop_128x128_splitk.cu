// FP8 (e4m3fn) operands, cooperative 128x128x128 tiles, K split into slices run as the
// batch mode (FP32 partials, summed by a second kernel).
// Kernels wait for the previous grid before their first read (dependent launch).
#define CUTLASS_ENABLE_GDC_FOR_SM90
#include "sm90_blockwise_gemm.cuh"
KFGEMM_DEFINE_VARIANT(fp8_coop_128x128_splitk, cutlass::float_e4m3_t,
                      cute::Shape<cute::_128, cute::_128, cute::_128>,
                      cute::Shape<cute::_1, cute::_1, cute::_1>, true, false, true)
