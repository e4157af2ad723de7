"""Assembling ``build/<variant>/``: the flattened package, ``_ops.py``, the extension and
``metadata.json`` with per-file digests. The directory appears atomically: it is built
under a temporary name next to its final place and renamed over the old one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from kernelforge import __version__, digest
from kernelforge.build.plan import BuildPlan
from kernelforge.errors import BuildError
from kernelforge.manifest import Manifest

OPS_TEMPLATE = '''\
import torch
{import_line}
ops = torch.ops.{namespace}


def add_op_namespace_prefix(op_name: str) -> str:
    """Prefix op_name with this build's unique op namespace."""
    return f"{namespace}::{{op_name}}"
'''


def render_ops_py(namespace: str, *, has_extension: bool) -> str:
    """The generated ``_ops.py`` of a variant."""
    import_line = f"from . import {namespace}" if has_extension else ""
    return OPS_TEMPLATE.format(namespace=namespace, import_line=import_line)


def _copy_python_package(manifest: Manifest, dest: Path) -> None:
    package = manifest.root / "torch-ext" / manifest.python_name
    if not (package / "__init__.py").is_file():
        raise BuildError(
            f"{manifest.path}: the Python package {package}/__init__.py is missing; "
            f"fix: create torch-ext/{manifest.python_name}/__init__.py"
        )
    suffixes = {"." + ext.lstrip(".") for ext in manifest.pyext}
    for path in sorted(package.rglob("*")):
        rel = path.relative_to(package)
        if "__pycache__" in rel.parts or not path.is_file() or path.suffix == ".pyc":
            continue
        if path.suffix not in suffixes:
            continue
        if rel.as_posix() == "_ops.py":
            raise BuildError(
                f"{path} would be overwritten by the generated _ops.py; fix: delete it"
            )
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def metadata_for(
    manifest: Manifest,
    plan: BuildPlan,
    files: Mapping[str, str],
    provenance: Mapping[str, object],
) -> dict[str, object]:
    """The ``metadata.json`` document of a variant (kebab-case keys)."""
    backend: dict[str, object] = {"type": plan.backend}
    if plan.archs is not None:
        backend["archs"] = list(plan.archs)
    meta: dict[str, object] = {
        "name": manifest.name,
        "id": plan.module_id,
        "version": manifest.version if manifest.version is not None else 1,
        "license": manifest.license or "unknown",
        # [general] python-depends, then the backend's own ([general.cuda] ...), as
        # Hugging Face's builder writes them
        "python-depends": [*manifest.python_depends,
                           *manifest.backend_python_depends.get(plan.backend, ())],
        "backend": backend,
    }
    if manifest.upstream:
        meta["upstream"] = manifest.upstream
    if manifest.source:
        meta["source"] = manifest.source
    kernel_depends = [*manifest.kernel_depends,
                      *manifest.backend_kernel_depends.get(plan.backend, ())]
    if kernel_depends:
        meta["kernel-depends"] = [d.as_dict() for d in kernel_depends]
    meta["digest"] = {"algorithm": "sha256", "files": dict(sorted(files.items()))}
    meta["provenance"] = dict(provenance)
    return meta


def assemble_variant(
    manifest: Manifest,
    plan: BuildPlan,
    *,
    extension: Path | None,
    out_dir: Path,
    provenance: Mapping[str, object],
) -> Path:
    """Write ``out_dir/<variant>/`` atomically and return its path.

    Args:
        manifest: the project.
        plan: the build plan (names, archs).
        extension: the compiled ``.abi3.so``, or ``None`` for noarch builds.
        out_dir: the project's ``build/`` directory.
        provenance: the ``provenance`` object of ``metadata.json``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / plan.variant
    staging = Path(tempfile.mkdtemp(prefix=f".{plan.variant}.", dir=out_dir))
    try:
        _copy_python_package(manifest, staging)
        (staging / "_ops.py").write_text(
            render_ops_py(plan.namespace, has_extension=extension is not None)
        )
        if extension is not None:
            shutil.copyfile(extension, staging / f"{plan.namespace}.abi3.so")
            os.chmod(staging / f"{plan.namespace}.abi3.so", 0o755)
        files = digest.hash_tree(staging)
        meta = metadata_for(manifest, plan, files, provenance)
        (staging / "metadata.json").write_text(json.dumps(meta, indent=2) + "\n")
        os.chmod(staging, 0o755)
        _swap_into_place(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def _swap_into_place(staging: Path, final: Path) -> None:
    """Replace ``final`` with ``staging``; a reader sees the old or the new tree, whole."""
    if not final.exists():
        os.rename(staging, final)
        return
    trash = final.with_name(f".{final.name}.old-{os.getpid()}")
    os.rename(final, trash)
    try:
        os.rename(staging, final)
    except BaseException:
        os.rename(trash, final)
        raise
    shutil.rmtree(trash, ignore_errors=True)


def builder_provenance() -> dict[str, object]:
    """The ``kernel-builder`` entry of the provenance (names kernelforge as the builder)."""
    return {"version": __version__, "name": "kernelforge"}
