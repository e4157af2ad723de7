# Sourced by scripts/demo and scripts/test: creates the virtual environment on first use
# and installs kernelforge (editable) with what it needs; later runs reinstall only when
# pyproject.toml changed. Leaves the shell in the repository root, with CALLER_DIR the
# directory the script was run from and VENV an absolute path.
#   KERNELFORGE_VENV   where the environment lives (default: .venv in the repository,
#                      also where it is empty or blank; a relative path is taken from the
#                      directory you run the script in; a folder that does not exist
#                      yet, or an environment)
#   PYTHON             interpreter to create it with (default: python3, >= 3.10)
#   TORCH_SPEC         torch requirement installed when torch is missing (default: torch==2.13.0)
set -euo pipefail
CALLER_DIR=$PWD
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# empty or blank counts as unset, as for KERNELFORGE_HUB: not a folder named by blanks
case ${KERNELFORGE_VENV:-} in  # a VENV of the caller's shell is not ours to take
  *[![:space:]]*) ;;
  *) KERNELFORGE_VENV= ;;
esac
case $KERNELFORGE_VENV in
  "") VENV=$PWD/.venv ;;
  /*) VENV=$KERNELFORGE_VENV ;;
  *) VENV=$CALLER_DIR/$KERNELFORGE_VENV ;;
esac
# "python 3.X" when $1 runs as Python 3.10 or newer; exits 1 with its version otherwise
_python_ok() {
  "$1" -c 'import sys; v = sys.version_info; print(f"Python {v[0]}.{v[1]}"); sys.exit(v < (3, 10))'
}
# pip of the environment; a set-up cut short (Ctrl-C while venv ran ensurepip or pip
# replaced itself) can leave an environment without one, which ensurepip puts back
_pip() {
  if [ -z "${_pip_checked:-}" ] && ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
    echo "$VENV has no working pip (its set-up was cut short?): installing it" >&2
    if ! "$VENV/bin/python" -m ensurepip --upgrade --default-pip >/dev/null; then
      echo "error: $VENV has no pip and ensurepip could not install one;" \
           "fix: remove it (rm -rf $VENV) and run again" >&2
      exit 1
    fi
  fi
  _pip_checked=1
  "$VENV/bin/python" -m pip "$@"
}
# one set-up of an environment at a time (where flock is there): a second run started
# meanwhile waits for the first's to end, then finds what it made
_lock() {
  if command -v flock >/dev/null 2>&1; then
    exec 9<"$VENV"
    if ! flock -n 9; then
      echo "waiting for another run that is setting up $VENV" >&2
      flock 9
    fi
  fi
}
if [ -d "$VENV" ]; then _lock; fi
# (a link that leads nowhere is an environment whose Python is gone, not one to make)
if [ ! -x "$VENV/bin/python" ] && [ ! -L "$VENV/bin/python" ]; then
  py=${PYTHON:-python3}
  if ! have=$(_python_ok "$py" 2>/dev/null); then
    echo "error: kernelforge needs Python >= 3.10, and $py is ${have:-not Python 3.10+ (or does not run)};" \
         "fix: run again with PYTHON=/path/to/python3.10-or-newer" >&2
    exit 1
  fi
  # a folder of other things is not set up in (venv would mix bin/, lib/ and include/
  # into it); one that a set-up cut short left, with only those, is
  if [ -e "$VENV" ] && { [ ! -d "$VENV" ] || { [ ! -e "$VENV/pyvenv.cfg" ] &&
       [ -n "$(ls -A "$VENV" | grep -vxE 'bin|include|lib|lib64')" ]; }; }; then
    echo "error: $VENV is not a virtual environment, and it is not an empty folder to make" \
         "one in; fix: set KERNELFORGE_VENV to a folder that does not exist yet (or an" \
         "environment)" >&2
    exit 1
  fi
  if [ ! -d "$VENV" ]; then mkdir -p "$VENV"; _lock; fi
  if [ ! -x "$VENV/bin/python" ]; then  # else made by a run this one waited for
    echo "setting up $VENV with $have (first run)" >&2
    "$py" -m venv "$VENV"
    _pip install -q --disable-pip-version-check --upgrade pip
  fi
elif ! have=$(_python_ok "$VENV/bin/python" 2>/dev/null); then
  echo "error: $VENV holds ${have:-a Python that does not run (removed or upgraded away?)}," \
       "and kernelforge needs >= 3.10;" \
       "fix: remove it (rm -rf $VENV) and run again, with PYTHON=/path/to/python3.10-or-newer" >&2
  exit 1
fi
if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
  echo "installing ${TORCH_SPEC:-torch==2.13.0} (pip is quiet until it is done)" >&2
  _pip install -q --disable-pip-version-check "${TORCH_SPEC:-torch==2.13.0}"
fi
stamp="$VENV/.kernelforge-install"
want="$(pwd) $(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "installing kernelforge (editable) and its test dependencies into $VENV" >&2
  _pip install -q --disable-pip-version-check -e ".[test]"
  echo "$want" > "$stamp"
fi
exec 9<&-  # the set-up is done: what the script runs next does not hold the lock
