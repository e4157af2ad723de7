#!/usr/bin/env bash
# Build, test, benchmark and sanitize the kernel on a Hopper machine, as named stages.
# Each stage logs to /tmp/gemmlogs/<stage>.log; the logs are packed into
# $OUT/logs.tar.gz and the benchmark tables written to $OUT/gemm.{md,json} (OUT defaults
# to /tmp/out). Wheels the machine lacks (nvidia-cutlass, platformdirs, Hugging Face's
# kernels and its dependencies for tests/gpu/test_gemm_interop.py, ...) are taken
# from .whl/ when it has no package index. Usage (from the repository root):
#   bash kernels/gemm/dev/run_gpu.sh STAGE...
# Stages:
#   build      development build with prebuilt CUDA objects (.whl/devobj)
#   buildsrc   development build from source (CUTLASS from the wheel in .whl/)
#   kf         kernelforge build + publish to a local hub + the guide's Step 5
#              (later stages then load the kernel through kernelforge)
#   kfbase     before kf: build the kernel project under $BASE_TREE (e.g. the sources
#              before a change) beside it and publish it as kernels-community/gemmbase;
#              ab then times its op as "base op" (AB_BASE_REPO)
#   exactmiss (EXACTMISS_SHAPES=MxNxK[:seed] ...) exc test testk (TEST_K=pytest -k expression) testsplit bench ab stress (STRESS_SPECS) floor hostgap (HOSTGAP_SHAPES) hostprofile (HOSTPROFILE_SHAPES) eager (EAGER_SHAPES) timeline sweep ncu ncusrc memcheck racecheck racecheck10 racecheckamn racecheckbf16 racecheckfewrow memcheckfewrow racecheckexactmn memcheckexactmn racecheckexactk memcheckexactk racechecksplit memchecksplit racecheckcluster racecheck1 racemap sass pipeprobe wgmmaprobe toolchain
set -uo pipefail
export PYTHONUNBUFFERED=1 MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0a
# The image's default CXX (a g++ wrapper in /opt/gcc) links libstdc++ statically, which
# kernelforge refuses for extensions; the system g++ links it dynamically.
[ -x /usr/bin/g++ ] && export CXX=/usr/bin/g++
OUT=${OUT:-/tmp/out}
logs=/tmp/gemmlogs
mkdir -p "$OUT" "$logs"
root=$(pwd)
dev=/tmp/gemmdev
export GEMM_KERNEL_PATH=$dev/pkg
summary=()
run() {  # name timeout cmd...
  local name=$1 t=$2; shift 2
  local t0=$SECONDS
  timeout "$t" "$@" > "$logs/$name.log" 2>&1
  local rc=$?
  summary+=("$name rc=$rc $((SECONDS - t0))s")
  cp "$logs/$name.log" "$OUT/" 2>/dev/null  # kept even if a later stage runs out of time
  echo "== $name rc=$rc ($((SECONDS - t0)) s)"; tail -n 12 "$logs/$name.log" | cut -c1-300
}
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  python3 -c "import torch;print(torch.__version__, torch.version.cuda)"; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
site() {
  python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$root/src
}
# CUTLASS's headers from the nvidia-cutlass wheel in .whl/, for builds outside kernelforge.
cutlass_inc=/tmp/cutlass/cutlass_library/source/include
cutlass() {
  python3 -c "import zipfile,glob; zipfile.ZipFile(glob.glob('.whl/nvidia_cutlass-*.whl')[0]).extractall('/tmp/cutlass')"
}
for s in "$@"; do
  case $s in
    build) run build 300 python3 kernels/gemm/dev/build_dev.py --out $dev --objects .whl/devobj ;;
    buildsrc) cutlass
              run build 500 python3 kernels/gemm/dev/build_dev.py --out $dev --cutlass $cutlass_inc ;;
    kfbase) site
        export KERNELFORGE_HUB=/tmp/hub
        ( timeout 500 python3 -m kernelforge build "${BASE_TREE:?set BASE_TREE}/kernels/gemm" -j 8 \
            && python3 -m kernelforge publish "$BASE_TREE/kernels/gemm" --repo kernels-community/gemmbase
        ) > "$logs/kfbase.log" 2>&1 &
        base_pid=$!
        export AB_BASE_REPO=kernels-community/gemmbase ;;
    kf) site
        export KERNELFORGE_HUB=/tmp/hub
        run kfbuild 500 python3 -m kernelforge build kernels/gemm -j 16
        if [ -n "${base_pid:-}" ]; then
          wait "$base_pid"; echo "== kfbase rc=$?"; tail -n 3 "$logs/kfbase.log"; cp "$logs/kfbase.log" "$OUT/"
        fi
        run kfpublish 120 python3 -m kernelforge publish kernels/gemm --repo kernels-community/gemm
        run step5 120 python3 kernels/gemm/dev/step5.py
        unset GEMM_KERNEL_PATH
        export GEMM_KERNEL_REPO=kernels-community/gemm ;;
    exc) run exceptions 60 python3 kernels/gemm/dev/diag.py exceptions ;;
    diag) run diag 200 python3 kernels/gemm/dev/diag.py numerics ;;
    testsplit) run testsplit 200 python3 -m pytest tests/gpu -q -p no:cacheprovider --timeout 120 -ra --tb=short -k "split or variant or swizzle" ;;
    testk) run testk 300 python3 -m pytest tests/gpu -q -p no:cacheprovider --timeout 120 -ra --tb=short -k "${TEST_K:?set TEST_K}" ;;
    test) run test 400 python3 -m pytest tests/gpu -q -p no:cacheprovider --timeout 240 -ra --tb=short ;;
    bench) run bench 480 python3 benchmarks/gemm.py --out "$OUT" --rep 60 ;;
    timeline) run timeline 200 python3 kernels/gemm/dev/timeline.py ${TIMELINE_SHAPES:-} ;;
    ab) run ab 300 python3 kernels/gemm/dev/ab.py ${AB_SHAPES:-} ;;
    stress) run stress 300 python3 kernels/gemm/dev/stress.py ${STRESS_SPECS:-nt:4096x4096x7168:22:exact guide:4096x4096x7168:22:exact nt:4096x4096x7168:23:exact challenge:4096x4096x7168:20:exact a_mn:4096x4096x7168:20:exact challenge:1024x1536x7168:21:exact nt:256x7168x7168:19:exact} ;;
    floor) run floor 200 python3 kernels/gemm/dev/stream_floor.py ${FLOOR_SHAPES:-} ;;
    exactmiss) run exactmiss 120 python3 kernels/gemm/dev/exact_miss.py ${EXACTMISS_SHAPES:-} ;;
    hostgap) run hostgap 300 python3 kernels/gemm/dev/host_gap.py ${HOSTGAP_SHAPES:-} ;;
    hostprofile) run hostprofile 200 python3 kernels/gemm/dev/host_profile.py ${HOSTPROFILE_SHAPES:-nt:64x2112x7168 nt:64x32768x512} ;;
    eager) run eager 300 python3 kernels/gemm/dev/eager_rate.py ${EAGER_SHAPES:-} ;;
    sweep) run sweep 400 python3 benchmarks/gemm.py --out "$OUT" --rep 40 --sweep ;;
    memcheck) run memcheck 300 compute-sanitizer --tool memcheck --error-exitcode 9 python3 kernels/gemm/dev/sanitize.py all ;;
    racecheck) run racecheck 400 compute-sanitizer --tool racecheck --error-exitcode 9 python3 kernels/gemm/dev/sanitize.py ;;
    racecheck10) run racecheck_v10 550 compute-sanitizer --tool racecheck --error-exitcode 9 python3 kernels/gemm/dev/sanitize.py v10 ;;
    racecheckamn) run racecheck_amn 400 compute-sanitizer --tool racecheck --error-exitcode 9 python3 kernels/gemm/dev/sanitize.py amn ;;
    racecheckbf16) run racecheck_bf16 400 compute-sanitizer --tool racecheck --error-exitcode 9 python3 kernels/gemm/dev/sanitize.py bf16 ;;
    racecheckfewrow) run racecheck_fewrow 400 compute-sanitizer --tool racecheck --error-exitcode 9 python3 kernels/gemm/dev/sanitize.py fewrow ;;
    memcheckfewrow) run memcheck_fewrow 300 compute-sanitizer --tool memcheck --error-exitcode 9 python3 kernels/gemm/dev/sanitize.py fewrow ;;
    racecheckexactmn) run racecheck_exactmn 400 compute-sanitizer --tool racecheck --error-exitcode 9 python3 kernels/gemm/dev/sanitize.py exactmn ;;
    memcheckexactmn) run memcheck_exactmn 300 compute-sanitizer --tool memcheck --error-exitcode 9 python3 kernels/gemm/dev/sanitize.py exactmn ;;
    racecheckexactk) run racecheck_exactk 400 compute-sanitizer --tool racecheck --error-exitcode 9 python3 kernels/gemm/dev/sanitize.py exactk ;;
    memcheckexactk) run memcheck_exactk 300 compute-sanitizer --tool memcheck --error-exitcode 9 python3 kernels/gemm/dev/sanitize.py exactk ;;
    racechecksplit) run racecheck_split 400 compute-sanitizer --tool racecheck --error-exitcode 9 python3 kernels/gemm/dev/sanitize.py split ;;
    racecheckcluster) run racecheck_cluster 300 compute-sanitizer --tool racecheck --error-exitcode 9 python3 kernels/gemm/dev/sanitize.py cluster ;;
    memchecksplit) run memcheck_split 300 compute-sanitizer --tool memcheck --error-exitcode 9 python3 kernels/gemm/dev/sanitize.py split ;;
    racecheck1) run racecheck_cluster 300 compute-sanitizer --tool racecheck --print-limit 12 --error-exitcode 9 python3 kernels/gemm/dev/sanitize.py all ;;
    racemap) run racemap 120 sh -c "so=\$(find $dev /tmp/hub kernels/gemm/build -name '*.so' 2>/dev/null | head -1); python3 kernels/gemm/dev/racemap.py $logs/racecheck_cluster.log \$so $OUT/cluster2.sass" ;;
    sass) run sass 120 sh -c "for so in \$(find $dev /tmp/hub kernels/gemm/build -name '*.so' 2>/dev/null | head -1); do cuobjdump --dump-sass \$so | grep -o -E '(QGMMA|HGMMA)[.A-Z0-9x]*' | sort | uniq -c; cuobjdump --dump-resource-usage \$so | grep -A1 -i overlap; done" ;;
    ncu) run ncu 400 ncu --kernel-name regex:'device_kernel|gemm_kernel|prep_kernel|reduce_splits|nvjet|sm90_xmma' --launch-skip 0 --launch-count 14 --section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis python3 kernels/gemm/dev/ncu_profile.py ${PROFILE_SHAPES:-} ;;
    ncusrc) # per-instruction warp-state samples of the gemm kernels (PROFILE_VARIANTS) on one shape
        run ncusrc 400 ncu --kernel-name regex:'device_kernel|gemm_kernel' --launch-skip 0 --launch-count ${NCU_COUNT:-2} --section SpeedOfLight --section WarpStateStats --section SourceCounters --import-source no -f -o /tmp/ncusrc python3 kernels/gemm/dev/ncu_profile.py ${PROFILE_SHAPES:-nt:4096x4096x7168}
        ncu -i /tmp/ncusrc.ncu-rep --page details --csv > "$OUT/ncusrc_details.csv" 2>&1
        ncu -i /tmp/ncusrc.ncu-rep --page source --csv --print-source sass > "$OUT/ncusrc_source.csv" 2>&1
        gzip -f "$OUT/ncusrc_source.csv"; ls -la "$OUT" ;;
    pipeprobe) run pipeprobe 120 sh -c "nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/pipe_probe kernels/gemm/dev/pipe_probe.cu && /tmp/pipe_probe" ;;
    wgmmaprobe) cutlass
                run wgmmaprobe 120 sh -c "nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I$cutlass_inc -Ikernels/gemm/gemm -o /tmp/wgmma_probe kernels/gemm/dev/wgmma_probe.cu && /tmp/wgmma_probe" ;;
    toolchain) run toolchain 60 sh -c "which c++ g++; c++ --version | head -1; ls /opt/gcc/lib64 2>/dev/null | grep -i stdc; so=\$(find $dev/build /tmp/hub kernels/gemm/build -name '*.so' 2>/dev/null | head -1); echo so=\$so; ldd \$so | grep -i -E 'stdc|gcc'; echo defined std:: symbols: \$(nm -C --defined-only \$so | grep -c ' std::')" ;;
  esac
done
tar -czf "$OUT/logs.tar.gz" -C "$logs" .
echo; printf '%s\n' "${summary[@]}"
