"""Builds in Hugging Face's layouts load with kernelforge: the current flattened layout
(package files next to metadata.json) and the older one (the package in a directory of
its own inside the variant), as published on the Hub by their builder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kernelforge import digest, get_local_kernel
from kernelforge.errors import IntegrityError

pytestmark = pytest.mark.usefixtures("cpu_system")


def hf_metadata(module_id: str, files: dict[str, str] | None) -> dict[str, object]:
    """metadata.json as their builder writes it (kebab-case keys, builder provenance)."""
    meta: dict[str, object] = {
        "id": module_id,
        "name": "hf-scale",
        "version": 2,
        "license": "Apache-2.0",
        "python-depends": [],
        "backend": {"type": "cpu"},
        "provenance": {"kernel-builder": {"version": "0.13.0"}},
    }
    if files is not None:
        meta["digest"] = {"algorithm": "sha256", "files": files}
    return meta


def check_with_their_parser(path: Path) -> None:
    """Where Hugging Face's kernels package is installed, its own parser accepts the file."""
    try:
        from kernels._rust import Metadata
    except ImportError:
        return
    assert Metadata.read_from_file(str(path)).name.python_name == "hf_scale"


def test_flattened_hf_build_loads(tmp_path: Path) -> None:
    variant = tmp_path / "build" / "torch-universal"
    variant.mkdir(parents=True)
    (variant / "__init__.py").write_text("from ._ops import ops\nfrom .layers import scale\n")
    (variant / "_ops.py").write_text("ops = None\n")
    (variant / "layers.py").write_text("def scale(x):\n    return 3 * x\n")
    module_id = "hf_scale_universal_1a2b3c4"
    meta = hf_metadata(module_id, digest.hash_tree(variant))
    (variant / "metadata.json").write_text(json.dumps(meta))
    check_with_their_parser(variant / "metadata.json")

    module = get_local_kernel(tmp_path)
    assert module.__name__ == module_id and sys.modules[module_id] is module
    assert module.scale(7) == 21


def test_older_nested_hf_build_loads(tmp_path: Path) -> None:
    variant = tmp_path / "build" / "torch-universal"
    package = variant / "hf_scale"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from .layers import scale\n")
    (package / "layers.py").write_text("def scale(x):\n    return 5 * x\n")
    module_id = "hf_scale_universal_5d6e7f8"
    (variant / "metadata.json").write_text(json.dumps(hf_metadata(module_id, None)))
    check_with_their_parser(variant / "metadata.json")

    module = get_local_kernel(tmp_path)
    assert module.__name__ == module_id
    assert module.scale(7) == 35


def test_hf_build_with_a_changed_file_is_refused(tmp_path: Path) -> None:
    variant = tmp_path / "build" / "torch-universal"
    variant.mkdir(parents=True)
    (variant / "__init__.py").write_text("VALUE = 1\n")
    meta = hf_metadata("hf_scale_universal_0badf00", digest.hash_tree(variant))
    (variant / "metadata.json").write_text(json.dumps(meta))
    (variant / "__init__.py").write_text("VALUE = 2\n")
    with pytest.raises(IntegrityError, match="__init__.py"):
        get_local_kernel(tmp_path)
