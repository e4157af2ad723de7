// C entry point around one build of prep_operands, for dev/prep_bench.cu: compile
// gemm/prep.cu and this file with -Dkfgemm=kfgemm_ref (or kfgemm_alt) and
// -DKFGEMM_WRAP_NAME=ref_prep_operands (or alt_prep_operands), plus any -D under test.
#include "gemm_api.h"

#ifndef KFGEMM_WRAP_NAME
#error "define KFGEMM_WRAP_NAME"
#endif

extern "C" int KFGEMM_WRAP_NAME(const void* ops, int count, cudaStream_t stream) {
  return static_cast<int>(
      kfgemm::prep_operands(static_cast<const kfgemm::OperandPrep*>(ops), count, stream));
}
