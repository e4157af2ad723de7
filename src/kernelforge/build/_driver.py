"""Runs torch's extension tooling (setuptools + ninja) for one build plan.

Started by :mod:`kernelforge.build.compile` as ``python -m kernelforge.build._driver SPEC``
in a child process, so that setuptools' global state, torch's import and the compiler
environment never leak into the caller. ``SPEC`` is a JSON file written by the parent.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())

    # Imported here: this module only runs in the child process.
    from setuptools import setup
    from torch.utils import cpp_extension

    backend = spec["backend"]
    extension_cls = cpp_extension.CppExtension if backend == "cpu" else cpp_extension.CUDAExtension
    extra_compile_args = {"cxx": spec["cxx_flags"]}
    if backend != "cpu":
        # torch passes the 'nvcc' flags to hipcc on ROCm builds of torch.
        extra_compile_args["nvcc"] = spec["device_flags"]

    class BuildKernelExtension(cpp_extension.BuildExtension):
        """torch's BuildExtension, minus ``-DTORCH_API_INCLUDE_EXTENSION_H``.

        That define makes ``<torch/torch.h>`` pull in pybind11, which cannot be
        compiled against the Python limited API. Kernel bindings register ops with
        TORCH_LIBRARY and never need pybind11 (Hugging Face's builder does not set
        the define either).
        """

        def _add_compile_flag(self, extension, flag):  # type: ignore[no-untyped-def]
            if flag == "-DTORCH_API_INCLUDE_EXTENSION_H":
                return None
            return super()._add_compile_flag(extension, flag)

    ext = extension_cls(
        name=spec["namespace"],
        sources=spec["sources"],
        include_dirs=spec["include_dirs"],
        extra_compile_args=extra_compile_args,
        extra_link_args=spec.get("link_flags", []),
        py_limited_api=True,
    )
    setup(
        name=spec["namespace"],
        version="0",
        ext_modules=[ext],
        cmdclass={"build_ext": BuildKernelExtension.with_options(use_ninja=True)},
        options={"bdist_wheel": {"py_limited_api": "cp39"}},
        script_args=[
            "--quiet",
            "build_ext",
            "--build-lib",
            spec["build_lib"],
            "--build-temp",
            spec["build_temp"],
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
