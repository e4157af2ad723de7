"""kernelforge's errors as a user's code handles them: pickled across processes, printed."""

from __future__ import annotations

import concurrent.futures
import pickle
from pathlib import Path
from typing import Any

import pytest

from kernelforge import errors
from kernelforge.errors import (
    BuildError,
    HubError,
    IntegrityError,
    KernelforgeError,
    LockError,
    ManifestError,
    NotCachedError,
    SignatureMismatchError,
    ToolchainError,
    TrustError,
    UnreadableSignatureError,
    VariantError,
    VariantNotFoundError,
)
from kernelforge.hub._staging import publish_integrity_error
from kernelforge.manifest import load_manifest


def _manifest_errors(tmp_path: Path) -> list[ManifestError]:
    """A one-problem and a several-problem error, as ``load_manifest`` raises them."""
    found = []
    for text in ['[general\nname = 3\n',
                 '[general]\nname = 3\nbackends = "cuda"\n[torch]\nsrc = 5\n']:
        (tmp_path / "build.toml").write_text(text)
        with pytest.raises(ManifestError) as info:
            load_manifest(tmp_path)
        found.append(info.value)
    assert len(found[0].errors) == 1 and len(found[1].errors) > 1
    return found


def _samples(tmp_path: Path) -> list[KernelforgeError]:
    """One error of every class, made as the library makes it."""
    return [
        KernelforgeError("relu/torch-ext/relu/__init__.py: no '__version__ = \"...\"' "
                         "assignment found"),
        *_manifest_errors(tmp_path),
        ManifestError(tmp_path / "build.toml", "kernel.relu.cuda-capabilities",
                      "unknown architecture '9.9'", expected="a list such as ['9.0']",
                      fix="did you mean '9.0'?"),
        VariantError("'torch-cpu' is not a variant name"),
        VariantNotFoundError("org/relu", ["torch29-cxx11-cu128-x86_64-linux: rejected, "
                                          "no CUDA"], "torch 2.9, CPU only",
                             fix="build a CPU variant"),
        VariantNotFoundError(str(tmp_path), []),
        VariantNotFoundError("org/relu version 2 (branch v2, revision 3f2a9c1)", [],
                             problem="holds no build (no build/ file)",
                             fix="publish version 2 again"),
        BuildError("ninja exited with status 1"),
        ToolchainError("nvcc not found; fix: install the CUDA toolkit"),
        HubError("org/relu: no such repository"),
        NotCachedError("org/relu: not in the download cache; fix: kernelforge download"),
        IntegrityError(tmp_path / "build" / "torch-cpu", ["relu.so: digest differs"],
                       fix="download it again"),
        IntegrityError(tmp_path, ["x"], what="refusing to publish it:"),
        publish_integrity_error(tmp_path / "build" / "torch-cpu", ["a.py: missing"]),
        TrustError("org/relu is not signed by a trusted key"),
        SignatureMismatchError("org/relu: the signature build/torch-cpu.sig by trusted key "
                               "3f2a9c1d5e7b8a06 does not verify; refusing to load it, even "
                               "where the repository is allowed; fix: its publisher must "
                               "publish the kernel again with --sign", "torch-cpu",
                               problem="org/relu: the signature build/torch-cpu.sig by "
                                       "trusted key 3f2a9c1d5e7b8a06 does not verify"),
        UnreadableSignatureError("org/relu: build/torch-cpu.sig: not a valid signature "
                                 "file; the download cache's copy of build/torch-cpu.sig, "
                                 "kept from an earlier fetch, may be damaged; fix: "
                                 "'kernelforge cache remove org/relu --revision 3f2a9c1d5e7b'",
                                 "torch-cpu",
                                 problem="org/relu: build/torch-cpu.sig: not a valid "
                                         "signature file"),
        LockError("kernels.lock: no entry for org/relu"),
    ]


def _looks(err: BaseException) -> tuple[Any, ...]:
    """What a user sees of an error: its type, message, args and attributes."""
    attrs = {k: [_looks(e) if e is not err else "self" for e in v] if k == "errors" else v
             for k, v in vars(err).items()}
    return type(err), str(err), repr(err), err.args, attrs


def test_every_error_class_has_a_sample(tmp_path: Path) -> None:
    classes = {c for c in vars(errors).values()
               if isinstance(c, type) and issubclass(c, KernelforgeError)}
    assert classes == {type(e) for e in _samples(tmp_path)}


def test_errors_pickle(tmp_path: Path) -> None:
    for err in _samples(tmp_path):
        err.add_note("while loading org/relu")
        copy = pickle.loads(pickle.dumps(err))
        assert _looks(copy) == _looks(err)
        if isinstance(err, ManifestError) and len(err.errors) == 1:
            assert copy.errors == [copy]


def test_a_signature_refusal_keeps_its_problem_apart_from_its_fix() -> None:
    """A caller that knows where the copies came from restates the problem with its own
    fix (kernelforge.locate: the cache's, offline): ``problem`` holds it without the fix
    the message ends with, and is the message where none was given."""
    for kind in (SignatureMismatchError, UnreadableSignatureError):
        err = kind("org/relu: bad; fix: publish it again", "torch-cpu", problem="org/relu: bad")
        assert (str(err), err.problem, err.variant) == (
            "org/relu: bad; fix: publish it again", "org/relu: bad", "torch-cpu")
        assert pickle.loads(pickle.dumps(err)).problem == "org/relu: bad"
        assert kind("org/relu: bad", "torch-cpu").problem == "org/relu: bad"


def test_variant_not_found_stays_a_file_not_found_error_when_pickled() -> None:
    err = VariantNotFoundError("org/relu", ["a: rejected, no CUDA"], fix="f")
    copy = pickle.loads(pickle.dumps(err))
    assert isinstance(copy, FileNotFoundError) and isinstance(copy, LookupError)
    assert (copy.errno, copy.strerror, copy.filename) == (None, None, None)
    assert copy.trace == ["a: rejected, no CUDA"] and copy.fix == "f"


def _raise_not_found(what: str) -> None:
    raise VariantNotFoundError(what, [f"{what}: rejected, no CUDA"])


def test_error_raised_in_a_worker_process_reaches_the_caller() -> None:
    with concurrent.futures.ProcessPoolExecutor(max_workers=1) as pool:
        future = pool.submit(_raise_not_found, "org/relu")
        with pytest.raises(VariantNotFoundError) as info:
            future.result(timeout=60)
    assert info.value.trace == ["org/relu: rejected, no CUDA"]
