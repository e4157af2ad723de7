// BF16 operands (exactly converted FP8), cooperative 128x128x128 tiles, stream-K / split-K.
#include "sm90_blockwise_gemm.cuh"
KFGEMM_DEFINE_VARIANT(bf16_coop_128x128_streamk, cutlass::bfloat16_t,
                      cute::Shape<cute::_128, cute::_128, cute::_128>,
                      cute::Shape<cute::_1, cute::_1, cute::_1>, true, true)
