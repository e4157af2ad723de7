// BF16 operands (exactly converted FP8), cooperative 128x128x128 tiles, persistent
// data-parallel scheduling, started as a dependent launch after the operand preparation.
#define CUTLASS_ENABLE_GDC_FOR_SM90
#include "sm90_blockwise_gemm.cuh"
KFGEMM_DEFINE_VARIANT(bf16_coop_128x128, cutlass::bfloat16_t,
                      cute::Shape<cute::_128, cute::_128, cute::_128>,
                      cute::Shape<cute::_1, cute::_1, cute::_1>, true, false)
