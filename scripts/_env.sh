# Sourced by scripts/demo and scripts/test: creates the virtual environment on first use
# and installs kernelforge (editable) with what it needs; later runs reinstall only when
# pyproject.toml changed.
#   KERNELFORGE_VENV   where the environment lives (default: .venv in the repository)
#   PYTHON             interpreter to create it with (default: python3, >= 3.10)
#   TORCH_SPEC         torch requirement installed when torch is missing (default: torch==2.13.0)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV="${KERNELFORGE_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "setting up $VENV (first run)" >&2
  "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
fi
if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
  echo "installing ${TORCH_SPEC:-torch==2.13.0}" >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${TORCH_SPEC:-torch==2.13.0}"
fi
stamp="$VENV/.kernelforge-install"
want="$(pwd) $(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[test]"
  echo "$want" > "$stamp"
fi
