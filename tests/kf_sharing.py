"""Test helpers for sharing and trust: a fake Hugging Face Hub kept on disk, and tiny
pure-Python kernel builds (with a fake binary ``.so`` that is never imported).

``FakeHfApi`` implements the ``HfApi`` methods kernelforge calls (and the few more that
Hugging Face's ``kernels`` loader calls), storing repositories under a directory so that
several processes can share one fake remote. It behaves as the Hub does as seen through
``huggingface_hub``: the same parameters (no catch-all ``**kwargs``), the same return
types, and its HTTP failures are made by ``huggingface_hub``'s own status handling from a
response the Hub would send, so they are the exception classes the real client raises
(tests/test_hub_hf_fidelity.py checks all of this against the installed package).
Files that ``.gitattributes`` puts in LFS (the ``.so``) are listed as the Hub lists
them, by the blob id of their pointer and the sha256 of their contents.
Every downloaded file appends a line to ``fetch.log``; creating the file ``down`` in the
root makes every call fail as an unreachable network does, and ``fail_next`` makes the next
calls of one method fail (a busy Hub, a rate limit, a connection cut off mid-download).
"""

from __future__ import annotations

import collections
import fnmatch
import hashlib
import importlib
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from huggingface_hub import CommitOperationAdd, CommitOperationDelete, constants
from huggingface_hub.errors import (
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import repo_folder_name
from huggingface_hub.hf_api import (
    CommitInfo,
    GitRefInfo,
    GitRefs,
    KernelInfo,
    RepoFile,
    RepoFolder,
    RepoUrl,
)
from huggingface_hub.utils import filter_repo_objects, hf_raise_for_status
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


ENDPOINT = "https://huggingface.co"

#: The HTTP client huggingface_hub is built on (httpx2 for 2.x, httpx before): the fake
#: answers with its responses and fails with its connection error, as the real one does.
_client = importlib.import_module(
    importlib.import_module("huggingface_hub.errors").HTTPError.__module__.split(".")[0])


def hub_error(method: str, url: str, status: int, *, code: str | None = None,
              message: str = "", headers: dict[str, str] | None = None) -> HfHubHTTPError:
    """The exception ``huggingface_hub`` raises when the Hub answers ``status`` (with the
    ``X-Error-Code`` header ``code``, the error text ``message`` and any other
    ``headers``, such as ``Retry-After``) to ``method url``: made by its own status
    handling, so the class and fields are the real ones."""
    headers = {**({"X-Error-Code": code} if code else {}), **(headers or {})}
    body = {"json": {"error": message}} if message else {}
    response = _client.Response(status, headers=headers, request=_client.Request(method, url),
                                **body)
    try:
        hf_raise_for_status(response)
    except HfHubHTTPError as err:
        return err
    raise AssertionError(f"status {status} raised nothing")  # pragma: no cover


def download_error(err: BaseException) -> BaseException:
    """What ``hf_hub_download`` raises when its first request (the file's metadata) meets
    ``err`` and no local copy stands in: a missing or gated repository, revision or file
    and a 401 as they are; any other answer of the Hub (403, 429, 5xx) and a connection
    that failed as "cannot find the requested files", raised from ``err``."""
    if isinstance(err, (RepositoryNotFoundError, RevisionNotFoundError,
                        RemoteEntryNotFoundError)):
        return err
    if isinstance(err, HfHubHTTPError) and err.response.status_code == 401:
        return err
    if not isinstance(err, (HfHubHTTPError, OfflineModeIsEnabled, _client.ConnectError,
                            _client.TimeoutException)):
        return err  # anything else is not caught by the client either
    wrapped = LocalEntryNotFoundError(
        "An error happened while trying to locate the file on the Hub and we cannot find "
        "the requested files in the local cache. Please check your connection and try "
        "again or make sure your Internet connection is on.")
    wrapped.__cause__ = err
    return wrapped


def upload_error(path_in_repo: str, err: BaseException) -> BaseException:
    """What ``create_commit`` raises when the upload of a large file (an ``.so``, which
    ``.gitattributes`` puts in LFS) to the Hub's storage fails with ``err`` once the
    client's own retries are spent: made by ``huggingface_hub``'s own LFS upload code,
    so the class, the message and where it is raised are the real ones."""
    from unittest import mock

    from huggingface_hub import _commit_api

    def failing(**kwargs: Any) -> None:
        raise err

    op = CommitOperationAdd(path_in_repo=path_in_repo, path_or_fileobj=b"\x7fELF")
    oid = op.upload_info.sha256.hex()
    with mock.patch.object(_commit_api, "lfs_upload", failing):
        try:
            _commit_api._upload_lfs_files(actions=[{"oid": oid, "actions": {"upload": {}}}],
                                          oid2addop={oid: op}, headers={}, endpoint=ENDPOINT)
        except Exception as raised:  # noqa: BLE001 - the error is what this makes
            return raised
    raise AssertionError("the upload raised nothing")  # pragma: no cover


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _repo_file(tree: Path, rel: str, data: bytes) -> RepoFile:
    """A file of a commit as the Hub lists it: one that the commit's ``.gitattributes``
    puts in LFS (an ``.so``) by the git blob id of its pointer, with the sha256 of its
    contents in ``lfs``; any other by the git blob id of its contents."""
    attributes = tree / ".gitattributes"
    patterns = [line.split()[0] for line in attributes.read_text().splitlines()
                if "filter=lfs" in line.split()[1:]] if attributes.is_file() else []
    if any(fnmatch.fnmatchcase(rel.rsplit("/", 1)[-1], pattern) for pattern in patterns):
        sha256 = hashlib.sha256(data).hexdigest()
        pointer = (f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\n"
                   f"size {len(data)}\n").encode()
        return RepoFile(path=rel, size=len(data), oid=git_blob_id(pointer),
                        lfs={"size": len(data), "oid": sha256, "pointerSize": len(pointer)})
    return RepoFile(path=rel, size=len(data), oid=git_blob_id(data))


def _kind(repo_type: str | None) -> str:
    return repo_type or constants.REPO_TYPE_MODEL


class CountingApi:
    """A client passing every call on to ``api`` (a :class:`FakeHfApi`), counting them as
    ``"method org/name"`` in ``calls``."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.calls: collections.Counter[str] = collections.Counter()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.api, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[f"{name} {args[0]}"] += 1
            return method(*args, **kwargs)

        return call

    def by_method(self) -> dict[str, int]:
        """The calls counted by method alone."""
        counted: collections.Counter[str] = collections.Counter()
        for key, n in self.calls.items():
            counted[key.split()[0]] += n
        return dict(counted)


class FakeHfApi:
    """A Hugging Face Hub in a directory (see the module docstring).

    Kernel repositories live under ``root/repos/<org>/<name>`` (other repository types
    under ``root/repos-<type>/``): ``commits/<id>/`` holds each commit's files,
    ``refs/heads/`` and ``refs/tags/`` its refs. A new repository starts with one commit
    on ``main`` holding ``.gitattributes``, as the Hub makes it.
    """

    endpoint = ENDPOINT

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._failures: dict[str, list[tuple[BaseException, int | None]]] = {}

    # --- test controls -------------------------------------------------------------

    def go_down(self) -> None:
        (self.root / "down").write_text("")

    def come_up(self) -> None:
        (self.root / "down").unlink(missing_ok=True)

    def fail_next(self, method: str, *errors: BaseException, written: int | None = None
                  ) -> None:
        """Make the next calls of ``method`` (``list_repo_refs``, ``list_repo_tree``, and so
        ``list_repo_files``, ``repo_info``, ``hf_hub_download`` or ``create_commit``) in this
        process raise ``errors``, one a call, as the client raises them once its own retries
        are spent (for a commit, :func:`upload_error` makes what a failed upload raises);
        the calls after them reach the fake Hub again. ``hf_hub_download`` raises what
        the real client makes of them (:func:`download_error`); with ``written``, the
        error is raised as it is after that many bytes of the file were written where
        the real client keeps a download in progress
        (``.cache/huggingface/download/<file>.incomplete`` in ``local_dir``), as a
        download cut off halfway leaves them."""
        self._failures.setdefault(method, []).extend((e, written) for e in errors)

    def _injected(self, method: str) -> tuple[BaseException, int | None] | None:
        """The failure :meth:`fail_next` queued for this call of ``method``, if any."""
        queued = self._failures.get(method)
        return queued.pop(0) if queued else None

    def fetches(self) -> list[str]:
        log = self.root / "fetch.log"
        return log.read_text().splitlines() if log.exists() else []

    def tree(self, repo_id: str, commit: str) -> Path:
        return self._repo(repo_id, "kernel") / "commits" / commit

    def tamper(self, repo_id: str, commit: str, path: str, data: bytes | None) -> None:
        """Change (or, with None, delete) a file of a published commit in place."""
        target = self.tree(repo_id, commit) / path
        if data is None:
            target.unlink()
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)

    # --- internals -----------------------------------------------------------------

    def _request(self, method: str, url: str) -> None:
        """What happens before a request reaches the Hub: huggingface_hub's offline mode
        refuses it, and a network that is down fails to connect."""
        if constants.is_offline_mode():
            raise OfflineModeIsEnabled(f"Cannot reach {url}: huggingface_hub is in offline "
                                       "mode (HF_HUB_OFFLINE)")
        if (self.root / "down").exists():
            raise _client.ConnectError("[Errno -3] fake hub: the network is unreachable")

    def _api(self, repo_type: str | None, repo_id: str, *rest: str) -> str:
        return "/".join([f"{self.endpoint}/api/{_kind(repo_type)}s/{repo_id}", *rest])

    def _web(self, repo_type: str | None, repo_id: str, *rest: str) -> str:
        prefix = constants.REPO_TYPES_URL_PREFIXES.get(_kind(repo_type), "")
        return "/".join([f"{self.endpoint}/{prefix}{repo_id}", *rest])

    def _repo(self, repo_id: str, repo_type: str | None) -> Path:
        kind = _kind(repo_type)
        return self.root / ("repos" if kind == "kernel" else f"repos-{kind}") / repo_id

    def _existing(self, repo_id: str, repo_type: str | None, method: str, url: str) -> Path:
        repo = self._repo(repo_id, repo_type)
        if not (repo / "refs").is_dir():
            raise hub_error(method, url, 404, code="RepoNotFound",
                            message="Repository not found")
        return repo

    def _refs(self, repo: Path, kind: str) -> dict[str, str]:
        folder = repo / "refs" / kind
        if not folder.is_dir():
            return {}
        return {p.relative_to(folder).as_posix(): p.read_text().strip()
                for p in sorted(folder.rglob("*")) if p.is_file() and not p.name.startswith(".")}

    def _resolve(self, repo: Path, revision: str | None, method: str, url: str) -> str:
        revision = revision or constants.DEFAULT_REVISION
        for kind in ("heads", "tags"):
            refs = self._refs(repo, kind)
            if revision in refs:
                return refs[revision]
        rev = revision.lower()
        if len(rev) >= 4 and all(c in "0123456789abcdef" for c in rev):
            hits = [c.name for c in (repo / "commits").iterdir()
                    if not c.name.startswith(".") and c.name.startswith(rev)]
            if len(hits) == 1:
                return hits[0]
        raise hub_error(method, url, 404, code="RevisionNotFound",
                        message=f"Invalid rev id: {revision}")

    def _set_ref(self, repo: Path, kind: str, name: str, commit: str) -> None:
        ref = repo / "refs" / kind / name
        ref.parent.mkdir(parents=True, exist_ok=True)
        tmp = ref.with_name(f".{ref.name}.{uuid.uuid4().hex}.tmp")
        tmp.write_text(commit)
        os.replace(tmp, ref)

    def _lock(self, repo: Path) -> Any:
        """Serialize writers of one repository (several processes may share the fake)."""
        import contextlib
        import fcntl

        @contextlib.contextmanager
        def held() -> Iterator[None]:
            repo.mkdir(parents=True, exist_ok=True)
            with open(repo.parent / f".{repo.name}.lock", "w") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                yield

        return held()

    @staticmethod
    def _files(tree: Path) -> list[str]:
        return sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file())

    def _log_fetch(self, repo_id: str, commit: str, filename: str) -> None:
        with open(self.root / "fetch.log", "a") as log:
            log.write(f"{repo_id}@{commit[:12]}/{filename}\n")

    # --- reading -------------------------------------------------------------------

    def list_repo_refs(self, repo_id: str, *, repo_type: str | None = None,
                       include_pull_requests: bool = False,
                       token: str | bool | None = None) -> GitRefs:
        url = self._api(repo_type, repo_id, "refs")
        if (failure := self._injected("list_repo_refs")) is not None:
            raise failure[0]
        self._request("GET", url)
        repo = self._existing(repo_id, repo_type, "GET", url)

        def infos(kind: str) -> list[GitRefInfo]:
            return [GitRefInfo(name=n, ref=f"refs/{kind}/{n}", target_commit=c)
                    for n, c in self._refs(repo, kind).items()]

        return GitRefs(branches=infos("heads"), converts=[], tags=infos("tags"),
                       pull_requests=[] if include_pull_requests else None)

    def list_repo_tree(self, repo_id: str, path_in_repo: str | None = None, *,
                       recursive: bool = False, expand: bool = False,
                       revision: str | None = None, repo_type: str | None = None,
                       token: str | bool | None = None) -> Iterator[RepoFile | RepoFolder]:
        # a generator, as the real one is: nothing happens until it is iterated
        rev = quote(revision or constants.DEFAULT_REVISION, safe="")
        url = self._api(repo_type, repo_id, "tree", rev, *([path_in_repo] if path_in_repo
                                                            else []))
        if (failure := self._injected("list_repo_tree")) is not None:
            raise failure[0]
        self._request("GET", url)
        repo = self._existing(repo_id, repo_type, "GET", url)
        tree = repo / "commits" / self._resolve(repo, revision, "GET", url)
        base = tree / path_in_repo if path_in_repo else tree
        if not base.is_dir():
            raise hub_error("GET", url, 404, code="EntryNotFound",
                            message=f"{path_in_repo} does not exist on {revision or 'main'}")
        for p in sorted(base.rglob("*") if recursive else base.iterdir()):
            rel = p.relative_to(tree).as_posix()
            if p.is_dir():
                yield RepoFolder(path=rel, oid=hashlib.sha1(rel.encode()).hexdigest())
            else:
                yield _repo_file(tree, rel, p.read_bytes())

    def list_repo_files(self, repo_id: str, *, revision: str | None = None,
                        repo_type: str | None = None,
                        token: str | bool | None = None) -> list[str]:
        return [f.path for f in self.list_repo_tree(repo_id, recursive=True, revision=revision,
                                                    repo_type=repo_type, token=token)
                if isinstance(f, RepoFile)]

    def repo_info(self, repo_id: str, *, revision: str | None = None,
                  repo_type: str | None = None, timeout: float | None = None,
                  files_metadata: bool = False, expand: Any = None,
                  token: bool | str | None = None) -> KernelInfo:
        url = self._api(repo_type, repo_id, *(["revision", quote(revision, safe="")]
                                              if revision is not None else []))
        if repo_type not in constants.REPO_TYPES_WITH_KERNEL:
            raise ValueError("Unsupported repo type.")
        if (failure := self._injected("repo_info")) is not None:
            raise failure[0]
        self._request("GET", url)
        repo = self._existing(repo_id, repo_type, "GET", url)
        if _kind(repo_type) != "kernel":  # pragma: no cover - kernel repositories only
            raise NotImplementedError("the fake describes kernel repositories only")
        sha = self._resolve(repo, revision, "GET", url)
        return KernelInfo(id=repo_id, author=repo_id.split("/")[0], sha=sha, private=False,
                          gated=False)

    # --- downloading ---------------------------------------------------------------

    def _cache_folder(self, repo_id: str, repo_type: str | None,
                      cache_dir: str | os.PathLike[str] | None) -> Path:
        if cache_dir is None:  # the fake never writes to the user's real cache
            raise NotImplementedError("FakeHfApi downloads need cache_dir= or local_dir=")
        return Path(cache_dir) / repo_folder_name(repo_id=repo_id, repo_type=_kind(repo_type))

    def _cached_commit(self, folder: Path, revision: str) -> str | None:
        if (folder / "snapshots" / revision).is_dir():
            return revision
        ref = folder / "refs" / revision
        return ref.read_text().strip() if ref.is_file() else None

    def _fetch(self, repo: Path, repo_id: str, commit: str, filename: str, dest: Path,
               url: str) -> None:
        src = repo / "commits" / commit / filename
        if not src.is_file():
            raise hub_error("HEAD", url, 404, code="EntryNotFound",
                            message="Entry not found")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.incomplete")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
        self._log_fetch(repo_id, commit, filename)

    def hf_hub_download(self, repo_id: str, filename: str, *, subfolder: str | None = None,
                        repo_type: str | None = None, revision: str | None = None,
                        cache_dir: str | Path | None = None,
                        local_dir: str | Path | None = None,
                        force_download: bool = False, etag_timeout: float = 10,
                        token: bool | str | None = None,
                        local_files_only: bool = False) -> str:
        if subfolder:
            filename = f"{subfolder}/{filename}"
        revision = revision or constants.DEFAULT_REVISION
        folder = None if local_dir is not None else self._cache_folder(repo_id, repo_type,
                                                                       cache_dir)

        def local_copy() -> Path | None:
            if local_dir is not None:
                path = Path(local_dir).resolve() / filename
                return path if path.is_file() else None
            assert folder is not None
            commit = self._cached_commit(folder, revision)
            path = folder / "snapshots" / (commit or "-") / filename
            return path if path.is_file() else None

        if local_files_only:
            found = local_copy()
            if found is None:
                raise LocalEntryNotFoundError(
                    f"{filename} is not in the local cache and local_files_only=True")
            return str(found)
        url = self._web(repo_type, repo_id, "resolve", quote(revision, safe=""), filename)
        failure = self._injected("hf_hub_download")
        if failure is not None and failure[1] is None:
            raise download_error(failure[0])
        try:
            self._request("HEAD", url)
        except (OfflineModeIsEnabled, _client.ConnectError) as err:
            found = local_copy()  # the real client falls back to a local copy, else fails
            if found is not None:
                return str(found)
            raise LocalEntryNotFoundError(
                f"cannot reach the Hub for {filename} and it is not in the local cache") from err
        repo = self._existing(repo_id, repo_type, "HEAD", url)
        commit = self._resolve(repo, revision, "HEAD", url)
        if failure is not None:  # cut off after ``written`` bytes
            if local_dir is None:  # pragma: no cover - kernelforge downloads to local_dir
                raise NotImplementedError("FakeHfApi.fail_next(written=): local_dir= only")
            part = (Path(local_dir).resolve() / ".cache" / "huggingface" / "download"
                    / f"{filename}.incomplete")
            part.parent.mkdir(parents=True, exist_ok=True)
            part.write_bytes((repo / "commits" / commit / filename).read_bytes()[:failure[1]])
            raise failure[0]
        if local_dir is not None:
            base = Path(local_dir).resolve()
            dest = base / filename
            self._fetch(repo, repo_id, commit, filename, dest, url)
            meta = base / ".cache" / "huggingface" / "download" / f"{filename}.metadata"
            meta.parent.mkdir(parents=True, exist_ok=True)
            meta.write_text(f"{commit}\n{git_blob_id(dest.read_bytes())}\n0\n")
            (base / ".cache" / "huggingface" / ".gitignore").write_text("*")
            return str(dest)
        assert folder is not None
        dest = folder / "snapshots" / commit / filename
        if force_download or not dest.is_file():
            self._fetch(repo, repo_id, commit, filename, dest, url)
        if revision != commit:
            self._set_ref(folder, "", revision, commit)
        return str(dest)

    def snapshot_download(self, repo_id: str, *, repo_type: str | None = None,
                          revision: str | None = None, cache_dir: str | Path | None = None,
                          local_dir: str | Path | None = None, etag_timeout: float = 10,
                          force_download: bool = False, token: bool | str | None = None,
                          local_files_only: bool = False,
                          allow_patterns: list[str] | str | None = None,
                          ignore_patterns: list[str] | str | None = None,
                          max_workers: int = 8) -> str:
        if local_dir is not None:  # pragma: no cover - not needed by any caller
            raise NotImplementedError("FakeHfApi.snapshot_download: cache_dir= only")
        revision = revision or constants.DEFAULT_REVISION
        folder = self._cache_folder(repo_id, repo_type, cache_dir)
        url = self._api(repo_type, repo_id, "revision", quote(revision, safe=""))

        def cached() -> str:
            commit = self._cached_commit(folder, revision)
            if commit is None or not (folder / "snapshots" / commit).is_dir():
                raise LocalEntryNotFoundError(
                    f"no snapshot of {repo_id} at {revision} in the local cache")
            return str(folder / "snapshots" / commit)

        if local_files_only:
            return cached()
        try:
            self._request("GET", url)
        except (OfflineModeIsEnabled, _client.ConnectError):
            return cached()
        repo = self._existing(repo_id, repo_type, "GET", url)
        commit = self._resolve(repo, revision, "GET", url)
        wanted = filter_repo_objects(self._files(repo / "commits" / commit),
                                     allow_patterns=allow_patterns,
                                     ignore_patterns=ignore_patterns)
        snapshot = folder / "snapshots" / commit
        snapshot.mkdir(parents=True, exist_ok=True)
        for name in wanted:
            if force_download or not (snapshot / name).is_file():
                self._fetch(repo, repo_id, commit, name, snapshot / name,
                            self._web(repo_type, repo_id, "resolve", commit, name))
        if revision != commit:
            self._set_ref(folder, "", revision, commit)
        return str(snapshot)

    # --- writing -------------------------------------------------------------------

    def create_repo(self, repo_id: str, *, token: str | bool | None = None,
                    private: bool | None = None, repo_type: str | None = None,
                    exist_ok: bool = False) -> RepoUrl:
        if repo_type not in constants.REPO_TYPES_WITH_KERNEL:
            raise ValueError("Invalid repo type")
        url = f"{self.endpoint}/api/repos/create"
        self._request("POST", url)
        repo = self._repo(repo_id, repo_type)
        with self._lock(repo):
            if (repo / "refs").is_dir():
                if not exist_ok:
                    raise hub_error("POST", url, 409, message=f"You already created this "
                                    f"{_kind(repo_type)} repo")
            else:
                initial = hashlib.sha1(f"{repo_id} initial commit".encode()).hexdigest()
                (repo / "commits" / initial).mkdir(parents=True)
                (repo / "commits" / initial / ".gitattributes").write_text(
                    "*.so filter=lfs diff=lfs merge=lfs -text\n")
                self._set_ref(repo, "heads", constants.DEFAULT_REVISION, initial)
        return RepoUrl(self._web(repo_type, repo_id), endpoint=self.endpoint)

    def create_branch(self, repo_id: str, *, branch: str, revision: str | None = None,
                      token: bool | str | None = None, repo_type: str | None = None,
                      exist_ok: bool = False) -> None:
        url = self._api(repo_type, repo_id, "branch", quote(branch, safe=""))
        self._request("POST", url)
        repo = self._existing(repo_id, repo_type, "POST", url)
        if branch.startswith("refs/"):
            raise hub_error("POST", url, 400, message=f"Invalid reference for a branch: "
                                                      f"{branch}")
        with self._lock(repo):
            if branch in self._refs(repo, "heads"):
                if exist_ok:
                    return
                raise hub_error("POST", url, 409, message="Reference already exists")
            self._set_ref(repo, "heads", branch, self._resolve(repo, revision, "POST", url))

    def delete_branch(self, repo_id: str, *, branch: str, token: bool | str | None = None,
                      repo_type: str | None = None) -> None:
        url = self._api(repo_type, repo_id, "branch", quote(branch, safe=""))
        self._request("DELETE", url)
        repo = self._existing(repo_id, repo_type, "DELETE", url)
        if branch == constants.DEFAULT_REVISION:
            raise hub_error("DELETE", url, 403, message="Cannot delete the default branch")
        with self._lock(repo):
            if branch not in self._refs(repo, "heads"):
                raise hub_error("DELETE", url, 404, code="RevisionNotFound",
                                message=f"Invalid rev id: {branch}")
            (repo / "refs" / "heads" / branch).unlink()

    def create_tag(self, repo_id: str, *, tag: str, tag_message: str | None = None,
                   revision: str | None = None, token: bool | str | None = None,
                   repo_type: str | None = None, exist_ok: bool = False) -> None:
        url = self._api(repo_type, repo_id, "tag", quote(revision or "main", safe=""))
        self._request("POST", url)
        repo = self._existing(repo_id, repo_type, "POST", url)
        with self._lock(repo):
            if tag in self._refs(repo, "tags"):
                if exist_ok:
                    return
                raise hub_error("POST", url, 409, message="Tag already exists")
            self._set_ref(repo, "tags", tag, self._resolve(repo, revision, "POST", url))

    def create_commit(self, repo_id: str, operations: Iterable[Any], *, commit_message: str,
                      commit_description: str | None = None, token: str | bool | None = None,
                      repo_type: str | None = None, revision: str | None = None,
                      create_pr: bool | None = None, num_threads: int = 5,
                      parent_commit: str | None = None) -> CommitInfo:
        # the checks the client makes before sending anything
        if parent_commit is not None and not constants.REGEX_COMMIT_OID.fullmatch(parent_commit):
            raise ValueError(f"parent_commit: not a commit id: {parent_commit!r}")
        if not commit_message:
            raise ValueError("commit_message can't be empty")
        if repo_type not in constants.REPO_TYPES_WITH_KERNEL:
            raise ValueError("Invalid repo type")
        if create_pr:  # pragma: no cover - kernelforge never opens pull requests
            raise NotImplementedError("FakeHfApi: create_pr")
        operations = list(operations)
        additions = [op for op in operations if isinstance(op, CommitOperationAdd)]
        deletions = [op for op in operations if isinstance(op, CommitOperationDelete)]
        if len(additions) + len(deletions) != len(operations):  # pragma: no cover
            raise NotImplementedError("FakeHfApi: only CommitOperationAdd and Delete")
        for op in additions:
            if op._is_committed:
                raise ValueError(f"{op} was committed already and cannot be reused")
        branch = revision or constants.DEFAULT_REVISION
        url = self._api(repo_type, repo_id, "preupload", quote(branch, safe=""))
        if (failure := self._injected("create_commit")) is not None:
            raise failure[0]
        self._request("POST", url)
        repo = self._existing(repo_id, repo_type, "POST", url)
        with self._lock(repo):
            heads = self._refs(repo, "heads")
            if branch not in heads:  # a commit never creates a branch
                raise hub_error("POST", url, 404, code="RevisionNotFound",
                                message=f"Invalid rev id: {branch}")
            head = heads[branch]
            tree = repo / "commits" / head
            contents = []
            for op in additions:
                with op.as_file() as fh:
                    contents.append((op, fh.read()))
            gone = {op.path_in_repo.rstrip("/") for op in deletions}

            def unchanged(path: str, data: bytes) -> bool:
                if path in gone or any(str(p) in gone for p in Path(path).parents):
                    return False
                return (tree / path).is_file() and (tree / path).read_bytes() == data

            # the client drops additions the branch already holds, byte for byte; with
            # nothing left it sends no commit and answers with the branch's head
            todo = [(op, data) for op, data in contents if not unchanged(op.path_in_repo, data)]
            if not todo and not deletions:
                return self._commit_info(repo_type, repo_id, head, commit_message,
                                         commit_description)
            url = self._api(repo_type, repo_id, "commit", quote(branch, safe=""))
            if parent_commit is not None and not head.startswith(parent_commit.lower()):
                raise hub_error("POST", url, 412, message="A commit has happened since. "
                                "Please refresh and try again.")
            tmp = repo / "commits" / f".tmp-{uuid.uuid4().hex}"
            shutil.copytree(tree, tmp)
            try:
                for op in deletions:
                    target = tmp / op.path_in_repo.rstrip("/")
                    if op.is_folder and target.is_dir():
                        shutil.rmtree(target)
                    elif not op.is_folder and target.is_file():
                        target.unlink()
                    else:
                        raise hub_error("POST", url, 404, code="EntryNotFound",
                                        message=f"A file with this name doesn't exist: "
                                                f"{op.path_in_repo}")
                for op, data in todo:
                    target = tmp / op.path_in_repo
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data)
                digest = hashlib.sha1()
                for rel in self._files(tmp):
                    digest.update(rel.encode() + b"\0" + (tmp / rel).read_bytes())
                digest.update(f"{head}\0{commit_message}\0{uuid.uuid4()}".encode())
                commit = digest.hexdigest()
                os.rename(tmp, repo / "commits" / commit)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            self._set_ref(repo, "heads", branch, commit)
        for op in additions:
            op._is_committed = True
        return self._commit_info(repo_type, repo_id, commit, commit_message, commit_description)

    def _commit_info(self, repo_type: str | None, repo_id: str, commit: str, message: str,
                     description: str | None) -> CommitInfo:
        return CommitInfo(commit_url=self._web(repo_type, repo_id, "commit", commit),
                          commit_message=message, commit_description=description or "",
                          oid=commit, _endpoint=self.endpoint)


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


def without_token(monkeypatch: Any, tmp_path: Path) -> Path:
    """Leave ``huggingface_hub`` no token to find (no HF_TOKEN, no login, no OIDC
    exchange); return the path of the login's token file, which does not exist."""
    from huggingface_hub import constants

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    login = tmp_path / "hf-home" / "token"
    login.parent.mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(login))
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_IMPLICIT_TOKEN", False)
    return login


def isolate(monkeypatch: Any, tmp_path: Path) -> dict[str, Path]:
    """Point config, hub and cache at fresh directories; no offline mode, no overrides."""
    dirs = {name: tmp_path / name for name in ("config", "hub", "cache")}
    monkeypatch.setenv("KERNELFORGE_CONFIG", str(dirs["config"]))
    monkeypatch.setenv("KERNELFORGE_HUB", str(dirs["hub"]))
    monkeypatch.setenv("KERNELFORGE_CACHE", str(dirs["cache"]))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.delenv("LOCAL_KERNELS", raising=False)
    return dirs
