"""Helpers shared by the tests (imported by name; pytest puts tests/ on sys.path)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_RELU = REPO / "src" / "kernelforge" / "examples" / "relu"


def copy_example(dest: Path) -> Path:
    """A writable copy of the bundled relu project (sources only)."""
    shutil.copytree(EXAMPLE_RELU, dest,
                    ignore=shutil.ignore_patterns("build", ".kernelforge", "__pycache__"))
    return dest


def fake_environment(root: Path, version: str, cuda: str | None) -> Path:
    """An interpreter whose torch is a stub with only ``torch/version.py``."""
    torch_dir = root / "site" / "torch"
    torch_dir.mkdir(parents=True)
    (torch_dir / "__init__.py").write_text("")
    (torch_dir / "version.py").write_text(
        f"__version__ = {version!r}\ncuda = {cuda!r}\nhip = None\ngit_version = 'abc'\n"
    )
    python = root / "bin" / "python"
    python.parent.mkdir()
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{root / "site"}:$PYTHONPATH" '
                      f'exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python


def write_noarch_project(root: Path, name: str = "na") -> Path:
    """A pure-Python (``[torch-noarch]``) project for the cpu backend at ``root``: it
    builds without a compiler."""
    (root / "torch-ext" / name).mkdir(parents=True)
    (root / "torch-ext" / name / "__init__.py").write_text("")
    (root / "build.toml").write_text(
        f'[general]\nname = "{name}"\nversion = 1\nedition = 5\nlicense = "MIT"\n'
        'backends = ["cpu"]\n\n[torch-noarch]\n')
    return root


def write_metadata(vdir: Path, module_id: str, *, version: int = 1, backend: str | None = None,
                   archs: list[str] | None = None, with_digest: bool = True) -> None:
    """Write a ``metadata.json`` for a fabricated variant directory (kebab-case keys, the
    digest of the files already there unless ``with_digest`` is false). ``backend``:
    ``backend.type``; by default the backend a ``torch-<backend>`` directory names, else
    cpu."""
    if backend is None:
        named = vdir.name.removeprefix("torch-") if vdir.name.startswith("torch-") else ""
        backend = {"npu": "cann"}.get(named, named)
        if backend not in ("cuda", "rocm", "xpu", "metal", "cann"):
            backend = "cpu"
    import json

    from kernelforge import digest

    meta: dict[str, object] = {
        "name": "relu",
        "id": module_id,
        "version": version,
        "license": "Apache-2.0",
        "python-depends": [],
        "backend": {"type": backend, "archs": archs},
    }
    if with_digest:
        meta["digest"] = digest.digest_block(vdir)
    (vdir / "metadata.json").write_text(json.dumps(meta, indent=1))
