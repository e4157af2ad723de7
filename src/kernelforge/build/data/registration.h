// registration.h: supplied by the kernel builder, included by a kernel's
// torch_binding.cpp. Kernel projects do not ship this file.
//
// The builder compiles each extension with -DTORCH_EXTENSION_NAME=<namespace>, where
// <namespace> is unique per build (_<name>_<backend>_<uid>). The *_EXPAND macros let
// that macro expand before torch's registration macros paste it into identifiers.
#pragma once

#include <Python.h>

#define KF_CONCAT_IMPL(A, B) A##B
#define KF_CONCAT(A, B) KF_CONCAT_IMPL(A, B)
#define KF_STRINGIFY_IMPL(A) #A
#define KF_STRINGIFY(A) KF_STRINGIFY_IMPL(A)

// Many kernel sources use these generic names too.
#ifndef CONCAT
#define CONCAT(A, B) KF_CONCAT(A, B)
#endif
#ifndef STRINGIFY
#define STRINGIFY(A) KF_STRINGIFY(A)
#endif

#define TORCH_LIBRARY_EXPAND(NAME, MODULE) TORCH_LIBRARY(NAME, MODULE)
#define TORCH_LIBRARY_IMPL_EXPAND(NAME, DEVICE, MODULE) \
  TORCH_LIBRARY_IMPL(NAME, DEVICE, MODULE)

// For kernels on torch's stable ABI (torch/csrc/stable/library.h).
#define STABLE_TORCH_LIBRARY_EXPAND(NAME, MODULE) STABLE_TORCH_LIBRARY(NAME, MODULE)
#define STABLE_TORCH_LIBRARY_IMPL_EXPAND(NAME, DEVICE, MODULE) \
  STABLE_TORCH_LIBRARY_IMPL(NAME, DEVICE, MODULE)

// Python imports the extension as a module of its package (`from . import <NAME>`);
// the ops register themselves when the library loads, so the module stays empty.
#define REGISTER_EXTENSION(NAME)                                              \
  PyMODINIT_FUNC KF_CONCAT(PyInit_, NAME)(void) {                             \
    static struct PyModuleDef module = {PyModuleDef_HEAD_INIT,                \
                                        KF_STRINGIFY(NAME), NULL, 0, NULL};   \
    return PyModule_Create(&module);                                          \
  }
