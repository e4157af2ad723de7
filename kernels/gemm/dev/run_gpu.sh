#!/usr/bin/env bash
# One device call: build (prebuilt CUDA objects in .whl/devobj), tests, benchmark,
# sanitizers. Stages are independent; each logs under $OUT. Usage:
#   bash kernels/gemm/dev/run_gpu.sh [stages...]   (default: build test bench)
set -uo pipefail
export PYTHONUNBUFFERED=1 MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0a
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
stages=${*:-build test bench}
root=$(pwd)
dev=/tmp/gemmdev
export GEMM_KERNEL_PATH=$dev/pkg
summary=()
run() {  # name timeout cmd...
  local name=$1 t=$2; shift 2
  local t0=$SECONDS
  timeout "$t" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  summary+=("$name rc=$rc $((SECONDS - t0))s")
  echo "== $name rc=$rc ($((SECONDS - t0)) s)"; tail -n 25 "$OUT/$name.log"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$OUT/env.txt" 2>&1
python3 -c "import torch;print(torch.__version__, torch.version.cuda)" >> "$OUT/env.txt" 2>&1
for s in $stages; do
  case $s in
    build) run build 300 python3 kernels/gemm/dev/build_dev.py --out $dev --objects .whl/devobj ;;
    buildsrc) python3 -c "import zipfile,glob; zipfile.ZipFile(glob.glob('.whl/nvidia_cutlass-*.whl')[0]).extractall('/tmp/cutlass')"
              run build 500 python3 kernels/gemm/dev/build_dev.py --out $dev --cutlass /tmp/cutlass/cutlass_library/source/include ;;
    diag) run diag 200 python3 kernels/gemm/dev/diag.py numerics
          run diagexc 120 python3 kernels/gemm/dev/diag.py exceptions
          run diaggdb 200 cuda-gdb -q -batch -ex run -ex bt --args python3 kernels/gemm/dev/diag.py exceptions ;;
    exc) run exceptions 60 python3 kernels/gemm/dev/diag.py exceptions ;;
    test) run test 300 python3 -m pytest tests/gpu -q -p no:cacheprovider -x --timeout 240 -ra ;;
    testall) run test 400 python3 -m pytest tests/gpu -q -p no:cacheprovider --timeout 240 -ra --tb=short ;;
    bench) run bench 330 python3 benchmarks/gemm.py --out "$OUT" --rep 60 ;;
    sweep) run sweep 400 python3 benchmarks/gemm.py --out "$OUT" --rep 40 --sweep ;;
    memcheck) run memcheck 300 compute-sanitizer --tool memcheck --error-exitcode 9 python3 kernels/gemm/dev/sanitize.py all ;;
    racecheck) run racecheck 400 compute-sanitizer --tool racecheck --error-exitcode 9 python3 kernels/gemm/dev/sanitize.py ;;
    racecheck1) run racecheck_cluster 300 compute-sanitizer --tool racecheck --print-limit 3 --error-exitcode 9 python3 kernels/gemm/dev/sanitize.py all ;;
    toolchain) run toolchain 60 sh -c "so=$dev/build/_gemm_cuda_dev.so; which c++ g++; c++ --version | head -1; ls /opt/gcc/lib64 2>/dev/null | grep -i stdc; ldd \$so | grep -i -E 'stdc|gcc'; echo defined-std-symbols: \$(nm -C --defined-only \$so | grep -c ' std::'); nm -C --defined-only \$so | grep -E 'locale::classic|num_put<char' | head -5" ;;
    sass) run sass 120 sh -c "cuobjdump --dump-sass $dev/build/_gemm_cuda_dev.so | grep -c -E 'QGMMA|HGMMA'; cuobjdump --dump-sass $dev/build/_gemm_cuda_dev.so | grep -o -E '(QGMMA|HGMMA)[^ ]*' | sort | uniq -c" ;;
  esac
done
echo; printf '%s\n' "${summary[@]}"
