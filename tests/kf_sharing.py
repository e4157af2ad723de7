"""Test helpers for sharing and trust: a fake Hugging Face Hub kept on disk, and tiny
pure-Python kernel builds (with a fake binary ``.so`` that is never imported).

``FakeHfApi`` implements the few ``HfApi`` methods kernelforge calls, storing
repositories under a directory so that several processes can share one fake remote.
Every ``hf_hub_download`` appends a line to ``fetch.log``; creating the file ``down`` in
the root makes every call raise ``ConnectionError`` (the network is gone).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from huggingface_hub.errors import (
    EntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from kf_testutil import write_metadata

SO_NAME = "_relu_cpu_fake.abi3.so"


def make_variant(
    project: Path,
    variant: str = "torch-cpu",
    *,
    module_id: str | None = None,
    value: int = 1,
    version: int | None = 1,
    so_bytes: bytes = b"\x7fELF" + bytes(range(256)) * 64,
    with_digest: bool = True,
) -> Path:
    """Fabricate ``project/build/<variant>/``: a tiny kernel package with a fake .so."""
    vdir = project / "build" / variant
    vdir.mkdir(parents=True)
    (vdir / "__init__.py").write_text(f"from . import helper\nVALUE = {value}\n")
    (vdir / "helper.py").write_text("def double(x):\n    return 2 * x\n")
    (vdir / SO_NAME).write_bytes(so_bytes)
    write_metadata(vdir, module_id or uid(), version=version, with_digest=with_digest)
    return vdir


def uid(tag: str = "k") -> str:
    """A module id no other test uses (ids live in sys.modules for the whole run)."""
    return f"_relu_{tag}_{uuid.uuid4().hex[:10]}"


def _not_found(message: str) -> RepositoryNotFoundError:
    return RepositoryNotFoundError(message, response=SimpleNamespace(headers={}, request=None))


class FakeHfApi:
    """A Hugging Face Hub in a directory (see the module docstring)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    # --- test controls -------------------------------------------------------------

    def go_down(self) -> None:
        (self.root / "down").write_text("")

    def come_up(self) -> None:
        (self.root / "down").unlink(missing_ok=True)

    def fetches(self) -> list[str]:
        log = self.root / "fetch.log"
        return log.read_text().splitlines() if log.exists() else []

    def tree(self, repo_id: str, commit: str) -> Path:
        return self._repo(repo_id) / "commits" / commit

    def tamper(self, repo_id: str, commit: str, path: str, data: bytes | None) -> None:
        """Change (or, with None, delete) a file of a published commit in place."""
        target = self.tree(repo_id, commit) / path
        if data is None:
            target.unlink()
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)

    # --- internals -----------------------------------------------------------------

    def _check_up(self) -> None:
        if (self.root / "down").exists():
            raise ConnectionError("fake hub: the network is unreachable")

    def _repo(self, repo_id: str) -> Path:
        return self.root / "repos" / repo_id

    def _existing(self, repo_id: str) -> Path:
        repo = self._repo(repo_id)
        if not (repo / "refs").is_dir():
            raise _not_found(f"404: {repo_id} not found")
        return repo

    def _refs(self, repo_id: str, kind: str) -> dict[str, str]:
        folder = self._existing(repo_id) / "refs" / kind
        return {p.name: p.read_text().strip() for p in sorted(folder.iterdir())} \
            if folder.is_dir() else {}

    def _resolve(self, repo_id: str, revision: str | None) -> str:
        revision = revision or "main"
        for kind in ("heads", "tags"):
            refs = self._refs(repo_id, kind)
            if revision in refs:
                return refs[revision]
        commits = self._existing(repo_id) / "commits"
        hits = [c.name for c in commits.iterdir() if c.name.startswith(revision)]
        if len(hits) == 1:
            return hits[0]
        raise RevisionNotFoundError(f"404: revision {revision} of {repo_id} not found",
                                    response=SimpleNamespace(headers={}, request=None))

    def _set_ref(self, repo_id: str, kind: str, name: str, commit: str) -> None:
        ref = self._repo(repo_id) / "refs" / kind / name
        ref.parent.mkdir(parents=True, exist_ok=True)
        tmp = ref.with_name(f".{name}.tmp")
        tmp.write_text(commit)
        os.replace(tmp, ref)

    def _files(self, tree: Path) -> list[str]:
        return sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file())

    # --- the HfApi subset ----------------------------------------------------------

    def list_repo_refs(self, repo_id: str, *, repo_type: str | None = None, **_: Any) -> Any:
        self._check_up()
        assert repo_type == "kernel"

        def info(kind: str, prefix: str) -> list[Any]:
            return [SimpleNamespace(name=n, ref=f"refs/{prefix}/{n}", target_commit=c)
                    for n, c in self._refs(repo_id, kind).items()]

        return SimpleNamespace(branches=info("heads", "heads"), tags=info("tags", "tags"))

    def list_repo_files(self, repo_id: str, *, revision: str | None = None,
                        repo_type: str | None = None, **_: Any) -> list[str]:
        self._check_up()
        commit = self._resolve(repo_id, revision)
        return self._files(self._repo(repo_id) / "commits" / commit)

    def repo_info(self, repo_id: str, *, revision: str | None = None,
                  repo_type: str | None = None, **_: Any) -> Any:
        self._check_up()
        return SimpleNamespace(sha=self._resolve(repo_id, revision))

    def hf_hub_download(self, repo_id: str, filename: str, *, revision: str | None = None,
                        repo_type: str | None = None, local_dir: str | None = None,
                        **_: Any) -> str:
        self._check_up()
        assert local_dir is not None and repo_type == "kernel"
        commit = self._resolve(repo_id, revision)
        src = self._repo(repo_id) / "commits" / commit / filename
        if not src.is_file():
            raise EntryNotFoundError(f"404: {filename} not in {repo_id}@{commit}")
        dest = Path(local_dir) / filename
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        with open(self.root / "fetch.log", "a") as log:
            log.write(f"{repo_id}@{commit[:12]}/{filename}\n")
        return str(dest)

    def create_repo(self, repo_id: str, *, repo_type: str | None = None,
                    exist_ok: bool = False, **_: Any) -> None:
        self._check_up()
        repo = self._repo(repo_id)
        if (repo / "refs").is_dir():
            assert exist_ok
            return
        (repo / "commits").mkdir(parents=True)
        empty = hashlib.sha1(f"{repo_id} initial".encode()).hexdigest()
        (repo / "commits" / empty).mkdir()
        self._set_ref(repo_id, "heads", "main", empty)

    def create_branch(self, repo_id: str, *, branch: str, revision: str | None = None,
                      repo_type: str | None = None, exist_ok: bool = False, **_: Any) -> None:
        self._check_up()
        if branch in self._refs(repo_id, "heads"):
            assert exist_ok
            return
        self._set_ref(repo_id, "heads", branch, self._resolve(repo_id, revision))

    def create_tag(self, repo_id: str, *, tag: str, revision: str | None = None, **_: Any) -> None:
        self._set_ref(repo_id, "tags", tag, self._resolve(repo_id, revision))

    def create_commit(self, repo_id: str, operations: list[Any], *, commit_message: str,
                      repo_type: str | None = None, revision: str | None = None,
                      parent_commit: str | None = None, **_: Any) -> Any:
        self._check_up()
        branch = revision or "main"
        head = self._refs(repo_id, "heads")[branch]
        if parent_commit is not None and parent_commit != head:
            raise RuntimeError(f"412: {branch} moved (expected {parent_commit}, is {head})")
        commits = self._existing(repo_id) / "commits"
        tmp = commits / f".tmp-{uuid.uuid4().hex}"
        shutil.copytree(commits / head, tmp)
        for op in operations:
            target = tmp / op.path_in_repo
            if type(op).__name__ == "CommitOperationDelete":
                target.unlink()
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            data = op.path_or_fileobj
            target.write_bytes(data if isinstance(data, bytes) else Path(data).read_bytes())
        digest_ = hashlib.sha1()
        for rel in self._files(tmp):
            digest_.update(rel.encode() + b"\0" + (tmp / rel).read_bytes())
        digest_.update(f"{head}\0{commit_message}\0{uuid.uuid4()}".encode())
        commit = digest_.hexdigest()
        os.rename(tmp, commits / commit)
        self._set_ref(repo_id, "heads", branch, commit)
        return SimpleNamespace(oid=commit, commit_url=f"fake://{repo_id}/{commit}")


# --- environment ------------------------------------------------------------------------

TESTS = Path(__file__).resolve().parent


def cpu_only() -> None:
    """Make variant choice see a plain CPU Linux system without importing torch (speeds
    up the many short-lived processes of the crash and concurrency tests)."""
    import platform

    from kernelforge import variants

    facts = variants.SystemFacts((2, 13, 0), True, "cpu", None, platform.machine(), "linux")
    variants.detect_system = lambda: facts


def child_script(remote: Path, cache: Path, body: str) -> str:
    """Python source for a subprocess using the fake remote hub as ``hub``."""
    return (
        "import os, sys\n"
        f"sys.path.insert(0, {str(TESTS)!r})\n"
        "from kf_sharing import FakeHfApi, cpu_only\n"
        "cpu_only()\n"
        "from kernelforge.hub.hf import HfHub\n"
        f"api = FakeHfApi({str(remote)!r})\n"
        f"hub = HfHub(api=api, cache={str(cache)!r})\n" + body
    )


def isolate(monkeypatch: Any, tmp_path: Path) -> dict[str, Path]:
    """Point config, hub and cache at fresh directories; no offline mode, no overrides."""
    dirs = {name: tmp_path / name for name in ("config", "hub", "cache")}
    monkeypatch.setenv("KERNELFORGE_CONFIG", str(dirs["config"]))
    monkeypatch.setenv("KERNELFORGE_HUB", str(dirs["hub"]))
    monkeypatch.setenv("KERNELFORGE_CACHE", str(dirs["cache"]))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("LOCAL_KERNELS", raising=False)
    return dirs
