#!/usr/bin/env bash
# The core loop on a CUDA machine: `kernelforge demo` builds the bundled relu kernel for
# cpu and cuda, publishes it to a fresh local hub, loads each variant with get_kernel and
# compares with torch.relu; then get_kernel's load time, then the test suite.
# Usage: benchmarks/core_gpu.sh OUTDIR   (run from the repository root)
set -uo pipefail
out="${1:?usage: core_gpu.sh OUTDIR}"
mkdir -p "$out"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
work=$(mktemp -d)
export KERNELFORGE_HUB="$work/hub" XDG_CACHE_HOME="$work/cache"
# The image's default CXX links libstdc++ statically, which kernelforge refuses for
# extensions (a second C++ runtime beside torch's crashes on error paths).
[ -x /usr/bin/g++ ] && export CXX=/usr/bin/g++
{
  echo "## environment"
  date -u +"%Y-%m-%d %H:%M:%S UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])"
  nvcc --version | tail -1
  echo
  echo "## python3 -m kernelforge demo"
  time python3 -m kernelforge demo
  echo "exit status: $?"
  echo
  echo "## python3 -m kernelforge versions kernelforge-demo/relu"
  python3 -m kernelforge versions kernelforge-demo/relu
  echo
  echo "## get_kernel load time (cuda variant)"
  python3 benchmarks/load_time.py kernelforge-demo/relu --runs 5
} 2>&1 | tee "$out/core_gpu.log"
python3 -m pytest -q -p no:cacheprovider tests 2>&1 | tail -25 | tee "$out/pytest.log"
