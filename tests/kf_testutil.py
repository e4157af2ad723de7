"""Helpers shared by the tests (imported by name; pytest puts tests/ on sys.path)."""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_RELU = REPO / "src" / "kernelforge" / "examples" / "relu"


def copy_example(dest: Path) -> Path:
    """A writable copy of the bundled relu project (sources only)."""
    shutil.copytree(EXAMPLE_RELU, dest,
                    ignore=shutil.ignore_patterns("build", ".kernelforge", "__pycache__"))
    return dest
