"""Runs torch's extension tooling (setuptools + ninja) for one build plan.

Started by :mod:`kernelforge.build.compile` as ``python -m kernelforge.build._driver SPEC``
in a child process, so that setuptools' global state, torch's import and the compiler
environment never leak into the caller. ``SPEC`` is a JSON file written by the parent.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

#: Architecture flags: the extension's common device flags carry every kernel's; each
#: kernel section's sources get only their own.
ARCH_FLAG_PREFIXES = ("-gencode", "--offload-arch")


def _without_arch_flags(flags: list[str]) -> list[str]:
    return [f for f in flags if not f.startswith(ARCH_FLAG_PREFIXES)]


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())

    # Imported here: this module only runs in the child process.
    from setuptools import setup
    from torch.utils import cpp_extension

    backend = spec["backend"]
    extension_cls = cpp_extension.CppExtension if backend == "cpu" else cpp_extension.CUDAExtension
    sources, include_dirs = list(spec["sources"]), list(spec["include_dirs"])
    cxx_flags, device_flags = list(spec["cxx_flags"]), list(spec["device_flags"])
    groups = list(spec["groups"])
    if not sources:  # no binding source of its own: the first kernel section is the base
        first = groups.pop(0)
        sources, include_dirs = first["sources"], include_dirs + first["include_dirs"]
        cxx_flags += first["cxx_flags"]
        device_flags = _without_arch_flags(device_flags) + first["device_flags"]
    extra_compile_args = {"cxx": cxx_flags}
    if backend != "cpu":
        # torch passes the 'nvcc' flags to hipcc on ROCm builds of torch.
        extra_compile_args["nvcc"] = device_flags

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

        def build_extension(self, ext):  # type: ignore[no-untyped-def]
            # Each kernel section compiles with the common flags (torch's additions
            # included, they are in ext.extra_compile_args by now) plus its own, into
            # objects that the extension links with its binding.
            base = ext.extra_compile_args
            for group in groups:
                args = {"cxx": base["cxx"] + group["cxx_flags"]}
                if "nvcc" in base:
                    args["nvcc"] = _without_arch_flags(base["nvcc"]) + group["device_flags"]
                objects = self.compiler.compile(
                    group["sources"],
                    output_dir=os.path.join(self.build_temp, "kernel." + group["name"]),
                    include_dirs=ext.include_dirs + group["include_dirs"],
                    debug=self.debug,
                    extra_postargs=args,
                    depends=ext.depends,
                )
                ext.extra_objects = [*ext.extra_objects, *objects]
            return super().build_extension(ext)

    ext = extension_cls(
        name=spec["namespace"],
        sources=sources,
        include_dirs=include_dirs,
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
