#!/usr/bin/env bash
# Compile the CUDA sources of the gemm kernel into objects (for build_dev.py --objects).
# usage: build_objects.sh CUTLASS_INCLUDE_DIR OUT_DIR [JOBS]
set -euo pipefail
inc=$1; out=$2; jobs=${3:-4}
here=$(cd "$(dirname "$0")/.." && pwd)
nvcc=${NVCC:-nvcc}
mkdir -p "$out"
flags=(-c -std=c++17 -O3 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a
       --expt-relaxed-constexpr -Xcompiler -fPIC -I"$inc" -I"$here/gemm" -Xptxas -v)
ls "$here"/gemm/*.cu | xargs -P "$jobs" -I{} sh -c \
  'f={}; b=$(basename "$f" .cu); '"$nvcc"' '"${flags[*]}"' "$f" -o '"$out"'/$b.o > '"$out"'/$b.log 2>&1 || { echo "FAILED $b"; cat '"$out"'/$b.log; exit 1; }'
grep -h -E "registers|spill" "$out"/*.log | sort | uniq -c
