#!/usr/bin/env bash
# Build projects of a kernels-community checkout (Hugging Face's kernel repository, read
# as it is) with kernelforge, then run each project's own tests twice: against the build
# loaded by kernelforge, and loaded by Hugging Face's `kernels` (community_tests.py).
# Usage (from the repository root):
#   benchmarks/community.sh CHECKOUT OUTDIR [PROJECT...]
# CHECKOUT is a clone of github.com/huggingface/kernels-community; PROJECT a folder in it
# (default: a set with tests that build in minutes). Each project is copied to a
# temporary folder first, so the checkout is not written to. Environment: BACKEND (the
# backend to build; default cuda when torch sees a GPU, else cpu), ARCH (--arch, e.g.
# 9.0 to build one capability), JOBS (-j per project), PARALLEL (projects built at once),
# BUILD_TIMEOUT and TEST_TIMEOUT (seconds per project). A project that depends on CUTLASS
# needs the nvidia-cutlass release its build.toml names on the path
# (`kernelforge check PROJECT` says which). One log per project lands in OUTDIR, and
# OUTDIR/summary.md holds a line per project.
set -uo pipefail
checkout=$(cd "${1:?usage: community.sh CHECKOUT OUTDIR [PROJECT...]}" && pwd)
out=$(mkdir -p "${2:?usage: community.sh CHECKOUT OUTDIR [PROJECT...]}" && cd "$2" && pwd)
shift 2
projects=("$@")
[ ${#projects[@]} -gt 0 ] || projects=(relu activation rotary causal-conv1d paged-attention
                                       punica-sgmv megablocks deformable-detr rwkv)
root=$(pwd)
export PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
backend=${BACKEND:-$(python3 -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

one() {  # project
  local p=$1 log="$out/$1.log" t0=$SECONDS built=no result=""
  cp -r "$checkout/$p" "$work/$p"
  rm -rf "$work/$p/build"
  {
    echo "## kernelforge build $p --backend $backend ${ARCH:+--arch $ARCH}"
    if timeout "${BUILD_TIMEOUT:-900}" python3 -m kernelforge build "$work/$p" --backend "$backend" \
        ${ARCH:+--arch "$ARCH"} ${JOBS:+-j "$JOBS"}; then built=yes; fi
    echo "build: $built ($((SECONDS - t0)) s)"
  } > "$log" 2>&1
  result="built $built"
  if [ $built = yes ] && [ -d "$work/$p/tests" ]; then
    for loader in kernelforge kernels; do
      local part="$work/$p.$loader.log" rc
      # importlib import mode: a tests/kernels folder must not shadow the kernels package
      timeout "${TEST_TIMEOUT:-600}" python3 "$root/benchmarks/community_tests.py" "$loader" \
        "$work/$p" tests -q -ra --tb=short --import-mode=importlib > "$part" 2>&1
      rc=$?
      { echo "## tests, loaded by $loader (exit $rc)"; cat "$part"; } >> "$log"
      [ $rc = 124 ] && result="$result; $loader: stopped after ${TEST_TIMEOUT:-600} s" && continue
      result="$result; $loader: $(grep -E '^[0-9]+ (passed|failed|skipped|errors?|deselected|warnings?,)|^=+ .* in [0-9.]+s' "$part" | tail -n 1 | tr -d '=' | xargs) (exit $rc)"
    done
  elif [ $built = yes ]; then
    python3 -c "import kernelforge, sys; m = kernelforge.get_local_kernel(sys.argv[1]); print('kernelforge loads', m.__name__)" "$work/$p" >> "$log" 2>&1 \
      && result="$result; loads with kernelforge" || result="$result; kernelforge cannot load it"
    python3 -c "import kernels, pathlib, sys; m = kernels.get_local_kernel(pathlib.Path(sys.argv[1])); print('kernels loads', m.__name__)" "$work/$p" >> "$log" 2>&1 \
      && result="$result, with kernels" || result="$result, kernels cannot load it"
  fi
  echo "- $p: $result ($((SECONDS - t0)) s)" | tee -a "$out/summary.md"
}

{
  echo "# kernels-community projects built with kernelforge"
  echo
  date -u +"%Y-%m-%d %H:%M:%S UTC"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no GPU"
  python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"
  # the checkout's commit, when it is a clone of its own (not a folder of another repository)
  if [ "$(git -C "$checkout" rev-parse --show-toplevel 2>/dev/null)" = "$checkout" ]; then
    git -C "$checkout" log -1 --format='kernels-community %H (%cd)'
  else
    echo "kernels-community: $checkout (not a git clone: its commit is not known)"
  fi
  echo "backend $backend${ARCH:+, arch $ARCH}"
  echo
} > "$out/summary.md"
running=0
for p in "${projects[@]}"; do
  one "$p" &
  running=$((running + 1))
  if [ "$running" -ge "${PARALLEL:-4}" ]; then wait -n; running=$((running - 1)); fi
done
wait
