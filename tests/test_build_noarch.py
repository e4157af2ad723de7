"""Noarch projects (pure Python / Triton) are packaged without a compiler."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from kernelforge.build import build_project
from kernelforge.errors import BuildError

pytestmark = pytest.mark.usefixtures("cpu_system")


def noarch_project(root: Path, manifest: str) -> Path:
    pkg = root / "torch-ext" / "scale"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from ._ops import ops\n\ndef scale(x, s):\n    return x * s\n"
    )
    (pkg / "kernels.py").write_text("FACTOR = 3\n")
    (pkg / "notes.txt").write_text("not packaged: .txt is not in pyext\n")
    (root / "build.toml").write_text(textwrap.dedent(manifest))
    return root


EDITION5 = """
    [general]
    name = "scale"
    edition = 5
    version = 3
    license = "MIT"
    backends = ["cuda", "cpu"]

    [torch-noarch]
"""

LEGACY_UNIVERSAL = """
    [general]
    name = "scale"
    universal = true
"""


def test_noarch_builds_one_variant_per_backend(tmp_path: Path) -> None:
    project = noarch_project(tmp_path / "scale", EDITION5)
    results = build_project(project, progress=lambda _: None)
    assert sorted(r.variant for r in results) == ["torch-cpu", "torch-cuda"]
    for r in results:
        names = sorted(p.name for p in r.path.iterdir())
        assert names == ["__init__.py", "_ops.py", "kernels.py", "metadata.json"]
        meta = json.loads((r.path / "metadata.json").read_text())
        assert meta["version"] == 3 and meta["backend"]["type"] == r.backend
        assert set(meta["digest"]["files"]) == {"__init__.py", "_ops.py", "kernels.py"}
        ops = (r.path / "_ops.py").read_text()
        assert "from . import" not in ops  # no extension to import
        assert f"torch.ops._scale_{r.backend}_" in ops
    # unchanged: nothing is rewritten
    again = build_project(project, progress=lambda _: None)
    assert all(r.up_to_date for r in again)


def test_legacy_universal_builds_torch_universal(tmp_path: Path) -> None:
    project = noarch_project(tmp_path / "scale", LEGACY_UNIVERSAL)
    (result,) = build_project(project, progress=lambda _: None)
    assert result.variant == "torch-universal"
    from kernelforge import get_local_kernel

    module = get_local_kernel(project)
    assert module.scale(2, 5) == 10


def test_noarch_refuses_backends_it_does_not_list(tmp_path: Path) -> None:
    project = noarch_project(tmp_path / "scale", EDITION5)
    with pytest.raises(BuildError, match="rocm"):
        build_project(project, backends=["rocm"], progress=lambda _: None)


def test_noarch_archs_and_backend_python_depends_reach_the_metadata(tmp_path: Path) -> None:
    """[torch-noarch] archs restrict where the loader accepts the build; [general.cuda]
    python-depends are the cuda variant's only (Hugging Face's builder merges them with
    [general] python-depends in the same way)."""
    project = noarch_project(tmp_path / "scale", """
        [general]
        name = "scale"
        edition = 5
        version = 1
        license = "MIT"
        backends = ["cuda", "rocm", "cpu"]
        python-depends = ["einops"]

        [general.cuda]
        python-depends = ["nvidia-cutlass-dsl"]

        [torch-noarch]
        cuda-capabilities = ["9.0", "10.0"]
        rocm-archs = ["gfx942"]
    """)
    results = build_project(project, progress=lambda _: None)
    meta = {r.backend: json.loads((r.path / "metadata.json").read_text()) for r in results}
    assert meta["cuda"]["backend"] == {"type": "cuda", "archs": ["9.0", "10.0"]}
    assert meta["rocm"]["backend"] == {"type": "rocm", "archs": ["gfx942"]}
    assert meta["cpu"]["backend"] == {"type": "cpu"}
    assert meta["cuda"]["python-depends"] == ["einops", "nvidia-cutlass-dsl"]
    assert meta["rocm"]["python-depends"] == ["einops"]
    assert meta["cpu"]["python-depends"] == ["einops"]
