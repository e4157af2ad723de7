// FP8 (e4m3fn) operands, cooperative 128x128x128 tiles, stream-K / split-K scheduling.
#include "sm90_blockwise_gemm.cuh"
KFGEMM_DEFINE_VARIANT(fp8_coop_128x128_streamk, cutlass::float_e4m3_t,
                      cute::Shape<cute::_128, cute::_128, cute::_128>,
                      cute::Shape<cute::_1, cute::_1, cute::_1>, true, true)
