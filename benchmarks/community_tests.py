"""Run a kernel project's own test suite against its build, loaded by kernelforge or by
Hugging Face's ``kernels``.

Usage: python benchmarks/community_tests.py {kernelforge,kernels} PROJECT [PYTEST ARGS...]

PROJECT is a built kernel project (``kernelforge build PROJECT`` first). The loader named
loads the variant of ``PROJECT/build/`` that fits this machine and puts the package in
``sys.modules`` under the project's Python name, so that ``import <name>`` in the tests
gets it. The tests' own Hub lookups (``kernels.get_kernel("<org>/<project>")`` and
``kernels.get_local_kernel(path, ...)``) are answered from the same build: through
``LOCAL_KERNELS`` for ``kernels``, and through a stand-in ``kernels`` module that calls
kernelforge for ``kernelforge``. pytest then runs from PROJECT with the given arguments
(default: ``tests``); its exit status is this script's.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path
from typing import Any

#: Backend names, which a second positional argument of get_local_kernel may be.
BACKENDS = ("cpu", "cuda", "rocm", "xpu", "metal", "npu")


def _package_name(project: Path) -> str:
    from kernelforge.manifest import load_manifest

    return load_manifest(project).python_name


def _kernelforge_stand_in() -> types.ModuleType:
    """A ``kernels`` module whose loaders call kernelforge's."""
    import kernelforge

    def get_kernel(repo_id: str, **kwargs: Any) -> types.ModuleType:
        # LOCAL_KERNELS names the project, so no hub is asked
        keep = {k: v for k, v in kwargs.items() if k in ("revision", "version", "backend")}
        return kernelforge.get_kernel(repo_id, **keep)

    def get_local_kernel(repo_path: Any, second: str | None = None,
                         **kwargs: Any) -> types.ModuleType:
        # The second argument was the package name in older versions of `kernels`, and is
        # the backend in some newer ones.
        backend = kwargs.get("backend") or (second if second in BACKENDS else None)
        return kernelforge.get_local_kernel(repo_path, backend)

    stand_in = types.ModuleType("kernels")
    stand_in.get_kernel = get_kernel  # type: ignore[attr-defined]
    stand_in.get_local_kernel = get_local_kernel  # type: ignore[attr-defined]
    return stand_in


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("kernelforge", "kernels"):
        print(__doc__, file=sys.stderr)
        return 2
    loader, project, pytest_args = argv[0], Path(argv[1]).resolve(), argv[2:] or ["tests"]
    name = _package_name(project)
    repo = f"kernels-community/{project.name}"
    os.environ["LOCAL_KERNELS"] = f"{repo}={project}"
    if loader == "kernelforge":
        import kernelforge

        module = kernelforge.get_local_kernel(project)
        sys.modules["kernels"] = _kernelforge_stand_in()
    else:
        import kernels

        module = kernels.get_local_kernel(project)
    sys.modules[name] = module
    print(f"{loader}: {name} as {module.__name__} from {Path(module.__file__ or '').parent}",
          flush=True)

    import pytest

    os.chdir(project)
    return int(pytest.main(["-p", "no:cacheprovider", *pytest_args]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
