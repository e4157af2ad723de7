// FP8 (e4m3fn) operands, cooperative 128x128x128 tiles, persistent data-parallel
// scheduling. Unlike the stream-K build of the same tile, it waits for the previous grid
// in-kernel, so it can start while the operand preparation drains.
#define CUTLASS_ENABLE_GDC_FOR_SM90
#include "sm90_blockwise_gemm.cuh"
KFGEMM_DEFINE_VARIANT(fp8_coop_128x128, cutlass::float_e4m3_t,
                      cute::Shape<cute::_128, cute::_128, cute::_128>,
                      cute::Shape<cute::_1, cute::_1, cute::_1>, true, false)
