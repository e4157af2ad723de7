"""Lock files: pin each kernel a project depends on to a commit and to every file's digest.

A project lists its kernels in ``pyproject.toml``, in kernelforge's table or in Hugging
Face's (both are read)::

    [tool.kernelforge.dependencies]
    "kernels-community/relu" = 1                    # version 1 (branch v1)
    "my-org/gemm" = ">=2"                           # the newest version >= 2
    "my-org/norm" = { revision = "v1.2" }           # a branch, tag or commit

    [tool.kernels.dependencies]
    "kernels-community/activation" = 1

``kernelforge lock`` writes ``kernelforge.lock``, JSON, which pins for each kernel the
commit and, for every build variant at that commit, the base64 sha256 of every file
(``metadata.json`` included)::

    {"format": "kernelforge-lock/1",
     "kernels": {"kernels-community/relu": {
         "requested": {"version": 1}, "hub": "hf", "repo": "kernels-community/relu",
         "branch": "v1", "commit": "<40 hex>",
         "variants": {"torch-cpu": {"files": {"__init__.py": "...", "metadata.json": "..."},
                                    "signer": "3f2a9c..."}},
         "depends": [
             {"requested": {"repo-id": "kernels-community/activation", "version": 1},
              "hub": "hf", "repo": "kernels-community/activation", "branch": "v1",
              "commit": "<40 hex>", "variants": {"torch-cpu": {"files": {...},
                                                               "signer": null}}}]}}}

``depends`` pins the kernels that the kernel's variants list in their ``metadata.json``
``kernel-depends``, and theirs, transitively: one flat list per locked kernel, one entry
per request (``requested`` is the ``kernel-depends`` entry itself: ``repo-id`` and
``version`` or ``revision``), each resolved when locking as a load would resolve it
and pinned like the kernel (commit, every variant's files). A locked load takes each
dependency from this list; a lock without ``depends`` (written before kernelforge pinned
dependencies) loads them as :func:`kernelforge.get_kernel` would choose them, with a
warning, as it does a dependency the list leaves out.

When the project uses ``[tool.kernels.dependencies]`` it also writes Hugging Face's
``kernels.lock`` (commit only; their reader rejects unknown fields, hence two files), so
their loader keeps working: one entry per kernel, then one per ``kernel-depends``
request the kernels pin (their loader resolves a dependency by its exact request in the
same flat list). It can only pin a commit of the repository it names, and their loader
follows no ``kernel-status.toml`` redirect: a redirected kernel is left out of it, with a
warning that names the destination to depend on instead (``kernelforge.lock`` pins the
redirect). Both formats are read: a ``kernels.lock`` pins commits, and the files
are checked against their metadata only; each of its entries also pins the same
``kernel-depends`` request of any kernel it lists. It records no hub, so with no
``hub=`` a load (or download) takes each kernel from the local hub when that holds the
repository at the locked commit, else from the Hugging Face Hub
(:func:`kernelforge.locate.hub_for_lock`).

The package holds one module per concept: ``_model`` (what a project asks for and what a
lock pins), ``_pyproject`` (the dependency tables), ``_read`` and ``_write`` (the
files), ``_pin`` (locking) and ``_download``; its public names are re-exported here.
"""

from __future__ import annotations

from kernelforge.lock._download import UNLIKE_LOCK_FIX as UNLIKE_LOCK_FIX
from kernelforge.lock._download import DownloadProgress, download_locked
from kernelforge.lock._download import raise_if_unlike_lock as raise_if_unlike_lock
from kernelforge.lock._model import FORMAT as FORMAT
from kernelforge.lock._model import (
    HF_LOCK_FILE,
    LOCK_FILE,
    DependencyKey,
    LockedKernel,
    LockedVariant,
    LockFile,
    Requirement,
    dependency_key,
    describe_dependency,
    warn_unpinned,
)
from kernelforge.lock._pin import WRITER_LOCK_TIMEOUT_S as WRITER_LOCK_TIMEOUT_S
from kernelforge.lock._pin import LockResult as LockResult
from kernelforge.lock._pin import Needs as Needs
from kernelforge.lock._pin import lock_kernel as lock_kernel
from kernelforge.lock._pin import lock_project
from kernelforge.lock._pyproject import read_requirements
from kernelforge.lock._read import EMPTY_LOCK_GIVE as EMPTY_LOCK_GIVE
from kernelforge.lock._read import (
    EMPTY_LOCK_WHY,
    check_lockfile,
    installed_lock,
    read_lock,
)
from kernelforge.lock._read import METADATA_LOCK_FILES as METADATA_LOCK_FILES
from kernelforge.lock._read import lock_file_path as lock_file_path

# Imported "as" themselves above: public names that other modules and the documentation
# use (FORMAT, lock_kernel, LockResult, ...), left out of `from kernelforge.lock import *`.
__all__ = [
    "EMPTY_LOCK_WHY",
    "HF_LOCK_FILE",
    "LOCK_FILE",
    "DependencyKey",
    "DownloadProgress",
    "LockFile",
    "LockedKernel",
    "LockedVariant",
    "Requirement",
    "check_lockfile",
    "dependency_key",
    "describe_dependency",
    "download_locked",
    "installed_lock",
    "lock_project",
    "read_lock",
    "read_requirements",
    "warn_unpinned",
]
