"""HfHub and its test fake against the installed ``huggingface_hub`` (and Hugging Face's
``kernels`` loader): every ``HfApi`` method and keyword HfHub uses exists on the real API,
the fake takes the same ones and nothing else, returns the real types and raises the real
errors; the Hub's own behaviours that matter to publishing (a commit never creates a
branch, a stale ``parent_commit`` is refused, unchanged files make no commit) and to
loading (offline mode, missing files, gated repositories) reach the user as HubErrors
with the right advice; and a repository HfHub publishes is one ``kernels`` loads."""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import huggingface_hub
import pytest
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, constants
from huggingface_hub import errors as hf_errors
from huggingface_hub.hf_api import CommitInfo, GitRefInfo, GitRefs, KernelInfo, RepoUrl
from kf_sharing import FakeHfApi, _client, hub_error, isolate, make_variant, uid

from kernelforge import loader, signing, trust
from kernelforge.errors import HubError
from kernelforge.hub import hf as hf_module
from kernelforge.hub.hf import HfHub, hf_offline

pytestmark = pytest.mark.usefixtures("cpu_system")

REPO = "kernels-test/relu"
HF_SOURCE = Path(hf_module.__file__)

#: The HfApi methods the fake mirrors (HfHub's and those ``kernels`` calls to load).
MIRRORED = ("list_repo_refs", "list_repo_tree", "list_repo_files", "repo_info",
            "hf_hub_download", "snapshot_download", "create_repo", "create_branch",
            "delete_branch", "create_tag", "create_commit")


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path: Path) -> dict[str, Path]:
    return isolate(monkeypatch, tmp_path)


@pytest.fixture
def key(tmp_path: Path) -> signing.SigningKey:
    k = signing.generate_key(tmp_path / "k.pem")
    trust.add_key(k.public.text, name="ci", repos=("kernels-test/*",))
    return k


def _publish(hub: HfHub, root: Path, *, version: int = 1, key=None, card=None, **kw) -> str:
    make_variant(root, "torch-cpu", version=version, **kw)
    return hub.publish(REPO, root, version=version, signer=key, card=card).commit


# --- the calls HfHub makes, read from its source -----------------------------------------


#: The keyword-only arguments HfHub._call takes for itself.
_CALL_OWN = frozenset(name for name, p in inspect.signature(HfHub._call).parameters.items()
                      if p.kind is inspect.Parameter.KEYWORD_ONLY)


def _calls_in_source() -> list[tuple[str, int, list[str], int]]:
    """``(method, n_positional, keywords, line)`` of every ``self._call(...)`` in hf.py."""
    found = []
    for node in ast.walk(ast.parse(HF_SOURCE.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "_call"):
            method = node.args[2]
            assert isinstance(method, ast.Constant) and isinstance(method.value, str), (
                f"hf.py:{node.lineno}: _call's method must be a literal name to be checked")
            assert not any(isinstance(a, ast.Starred) for a in node.args), node.lineno
            assert all(k.arg is not None for k in node.keywords), node.lineno
            # _call's own keyword-only arguments (``writing``: the advice on failure,
            # ``client``: which client answers, ...) are not forwarded
            found.append((method.value, len(node.args) - 3,
                          [str(k.arg) for k in node.keywords if k.arg not in _CALL_OWN],
                          node.lineno))
    return found


def _constructor_calls(name: str) -> list[tuple[list[str], int]]:
    """The keywords (and the line) of every call of ``name(...)`` or ``<module>.name(...)``
    in hf.py."""
    out = []
    for node in ast.walk(ast.parse(HF_SOURCE.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else (
            func.attr if isinstance(func, ast.Attribute) else None)
        if called == name:
            assert not node.args, f"hf.py:{node.lineno}: pass {name}'s arguments by keyword"
            out.append(([str(k.arg) for k in node.keywords], node.lineno))
    return out


def _binds(fn: Any, n_positional: int, keywords: list[str], *, method: bool) -> str | None:
    """Why ``fn`` cannot take this call, or None."""
    args = [object()] * (n_positional + (1 if method else 0))
    try:
        inspect.signature(fn).bind(*args, **{k: object() for k in keywords})
    except TypeError as err:
        return str(err)
    return None


def test_every_hfapi_call_in_hf_py_exists_on_the_real_api_and_the_fake() -> None:
    calls = _calls_in_source()
    assert {m for m, *_ in calls} >= {"list_repo_refs", "list_repo_tree", "repo_info",
                                      "hf_hub_download", "create_repo", "create_branch",
                                      "create_commit"}
    problems = []
    for method, n_pos, keywords, line in calls:
        real = getattr(HfApi, method, None)
        if real is None:
            problems.append(f"hf.py:{line}: HfApi has no method {method!r}")
            continue
        fake = getattr(FakeHfApi, method, None)
        if fake is None:
            problems.append(f"hf.py:{line}: FakeHfApi has no method {method!r}")
            continue
        for who, fn in (("HfApi", real), ("FakeHfApi", fake)):
            why = _binds(fn, n_pos, keywords, method=True)
            if why:
                problems.append(f"hf.py:{line}: {who}.{method}({n_pos} positional, "
                                f"{', '.join(keywords)}): {why}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", ["HfApi", "CommitOperationAdd", "CommitOperationDelete"])
def test_constructors_in_hf_py_take_their_keywords(name: str) -> None:
    cls = getattr(huggingface_hub, name)
    calls = _constructor_calls(name)
    assert calls, f"hf.py makes no {name}: update this test"
    for keywords, line in calls:
        why = _binds(cls, 0, keywords, method=False)
        assert why is None, f"hf.py:{line}: {name}({', '.join(keywords)}): {why}"


# --- the calls HfHub makes, recorded while it works --------------------------------------


class Recorder:
    """Forwards every method call to the fake, keeping ``(name, args, kwargs)``."""

    def __init__(self, api: FakeHfApi) -> None:
        self._api = api
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._api, name)
        if not callable(target):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            return target(*args, **kwargs)

        return call


def test_every_call_hf_hub_makes_binds_to_the_real_signature(remote: FakeHfApi, env,
                                                             tmp_path: Path, key) -> None:
    rec = Recorder(remote)
    hub = HfHub(api=rec, cache=env["cache"])
    commit = _publish(hub, tmp_path / "p", key=key, card="# relu\n", module_id=uid("rec"))
    _publish(hub, tmp_path / "p2", key=key, module_id=uid("rec2"))
    assert loader.get_kernel(REPO, version=1, hub=hub).VALUE == 1
    assert hub.read_file(REPO, commit, "README.md") == b"# relu\n"
    assert hub.resolve(REPO, commit[:8]) == commit
    used = {name for name, *_ in rec.calls}
    assert used == {"create_repo", "create_branch", "list_repo_refs", "list_repo_tree",
                    "create_commit", "hf_hub_download", "repo_info"}, used
    for name, args, kwargs in rec.calls:
        real = inspect.signature(getattr(HfApi, name))
        # bind raises TypeError on a parameter HfApi lacks
        bound = real.bind(None, *args, **kwargs).arguments
        for op in bound.get("operations", []) if name == "create_commit" else []:
            assert type(op) in (CommitOperationAdd, CommitOperationDelete), op


def test_the_fake_takes_exactly_the_real_parameters() -> None:
    """Each mirrored method: every parameter of the fake is one of the real method's,
    of the same kind and default; the real method's required ones are all there; and
    no catch-all ``**kwargs`` hides a keyword the real API would refuse."""
    problems = []
    for name in MIRRORED:
        real = inspect.signature(getattr(HfApi, name)).parameters
        fake = inspect.signature(getattr(FakeHfApi, name)).parameters
        for pname, p in fake.items():
            if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                problems.append(f"{name}: the fake takes *{pname}")
            elif pname not in real:
                problems.append(f"{name}: the real method has no parameter {pname!r}")
            elif (p.kind, p.default) != (real[pname].kind, real[pname].default):
                problems.append(f"{name}({pname}): fake {p.kind.name}={p.default!r}, real "
                                f"{real[pname].kind.name}={real[pname].default!r}")
        order = [n for n in real if n in fake]
        if order != [n for n in fake if n in real]:
            problems.append(f"{name}: parameters in another order than {order}")
        for pname, p in real.items():
            if p.default is p.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) \
                    and pname not in fake:
                problems.append(f"{name}: the fake lacks the required parameter {pname!r}")
    assert not problems, "\n".join(problems)


def test_the_drift_checks_catch_a_keyword_the_real_api_lacks() -> None:
    """The check above, given a call HfApi would refuse, says so."""
    assert _binds(HfApi.create_branch, 1, ["branch", "exist_ok", "from_revision"],
                  method=True)
    assert _binds(FakeHfApi.hf_hub_download, 2, ["revision", "subdir"], method=True)
    assert _binds(HfApi.hf_hub_download, 2, ["revision", "repo_type", "local_dir"],
                  method=True) is None


# --- what the fake returns and raises are the real types ---------------------------------


def test_the_fake_returns_the_real_types(remote: FakeHfApi, hf: HfHub, tmp_path: Path) -> None:
    url = remote.create_repo(REPO, repo_type="kernel")
    assert type(url) is RepoUrl and url.repo_id == REPO and url.repo_type == "kernel"
    assert remote.list_repo_files(REPO, repo_type="kernel") == [".gitattributes"]
    commit = _publish(hf, tmp_path / "p")
    refs = remote.list_repo_refs(REPO, repo_type="kernel")
    assert type(refs) is GitRefs and refs.converts == [] and refs.pull_requests is None
    assert all(type(r) is GitRefInfo for r in refs.branches)
    assert {(r.name, r.ref) for r in refs.branches} == {("main", "refs/heads/main"),
                                                        ("v1", "refs/heads/v1")}
    info = remote.repo_info(REPO, revision="v1", repo_type="kernel")
    assert type(info) is KernelInfo and info.sha == commit
    done = remote.create_commit(REPO, [CommitOperationAdd(path_in_repo="x", path_or_fileobj=b"1")],
                                commit_message="m", repo_type="kernel", revision="v1")
    assert type(done) is CommitInfo and done.oid != commit and done.repo_url.repo_id == REPO


def _raised(fn: Any, *args: Any, **kwargs: Any) -> BaseException:
    with pytest.raises(BaseException) as info:
        fn(*args, **kwargs)
    return info.value


def test_the_fake_raises_the_errors_huggingface_hub_raises(remote: FakeHfApi, hf: HfHub,
                                                           tmp_path: Path) -> None:
    commit = _publish(hf, tmp_path / "p")
    kernel = {"repo_type": "kernel"}
    cases = [
        (hf_errors.RepositoryNotFoundError, 404,
         lambda: remote.list_repo_refs("nobody/here", **kernel)),
        (hf_errors.RepositoryNotFoundError, 404,  # a kernel repo is no model repo
         lambda: remote.list_repo_refs(REPO)),
        (hf_errors.RevisionNotFoundError, 404,
         lambda: remote.repo_info(REPO, revision="nope", **kernel)),
        (hf_errors.RevisionNotFoundError, 404,
         lambda: remote.list_repo_files(REPO, revision="v9", **kernel)),
        (hf_errors.RemoteEntryNotFoundError, 404,
         lambda: remote.hf_hub_download(REPO, "build/none.py", revision=commit,
                                        local_dir=str(tmp_path / "dl"), **kernel)),
        (hf_errors.HfHubHTTPError, 409, lambda: remote.create_repo(REPO, **kernel)),
        (hf_errors.HfHubHTTPError, 409,
         lambda: remote.create_branch(REPO, branch="v1", **kernel)),
        (hf_errors.RevisionNotFoundError, 404,  # a branch from a revision that is not there
         lambda: remote.create_branch(REPO, branch="v2", revision="v7", **kernel)),
        (hf_errors.BadRequestError, 400,
         lambda: remote.create_branch(REPO, branch="refs/pr/1", **kernel)),
        (hf_errors.RevisionNotFoundError, 404,  # a commit never creates its branch
         lambda: remote.create_commit(REPO, [CommitOperationAdd(path_in_repo="a",
                                                                path_or_fileobj=b"a")],
                                      commit_message="m", revision="v2", **kernel)),
        (hf_errors.HfHubHTTPError, 412,  # a stale parent_commit
         lambda: remote.create_commit(REPO, [CommitOperationAdd(path_in_repo="a",
                                                                path_or_fileobj=b"a")],
                                      commit_message="m", revision="main",
                                      parent_commit=commit, **kernel)),
        (hf_errors.RemoteEntryNotFoundError, 404,
         lambda: remote.create_commit(REPO, [CommitOperationDelete(path_in_repo="gone.py")],
                                      commit_message="m", revision="v1", **kernel)),
    ]
    for cls, status, call in cases:
        err = _raised(call)
        assert type(err) is cls, (cls, err)
        assert isinstance(err, hf_errors.HfHubHTTPError) and err.response.status_code == status
    # raised by the client itself, before any request
    add = CommitOperationAdd(path_in_repo="a", path_or_fileobj=b"a")
    for kwargs in ({"commit_message": ""}, {"commit_message": "m", "parent_commit": "xyz"}):
        assert type(_raised(remote.create_commit, REPO, [add], revision="v1", **kwargs,
                            **kernel)) is ValueError
    remote.create_commit(REPO, [add], commit_message="m", revision="v1", **kernel)
    assert type(_raised(remote.create_commit, REPO, [add], commit_message="m", revision="v1",
                        **kernel)) is ValueError  # an operation is committed once
    # the network down: the client's own connection error; a download: nothing local
    remote.go_down()
    assert type(_raised(remote.list_repo_refs, REPO, **kernel)) is _client.ConnectError
    err = _raised(remote.hf_hub_download, REPO, "README.md", revision=commit,
                  local_dir=str(tmp_path / "dl2"), **kernel)
    assert type(err) is hf_errors.LocalEntryNotFoundError


@pytest.mark.parametrize(("status", "code"), [
    (401, None), (401, "RepoNotFound"), (403, "GatedRepo"), (403, None), (404, "RepoNotFound"),
    (429, None), (500, None), (503, None),
])
def test_a_download_fails_as_the_real_client_makes_it_fail(status: int, code: str | None
                                                           ) -> None:
    """The fake's failed download raises what hf_hub_download makes of the Hub's answer to
    its first request: some as they are, the rest as a file it cannot find. (A missing
    revision or file is raised as it is before this step, as the fake does too.)"""
    from huggingface_hub import file_download
    from kf_sharing import download_error

    real = getattr(file_download, "_raise_on_head_call_error", None)
    if real is None:  # pragma: no cover - another huggingface_hub layout
        pytest.skip("huggingface_hub has no _raise_on_head_call_error to compare with")
    err = hub_error("HEAD", "https://huggingface.co/kernels/a/b/resolve/main/x", status,
                    code=code)
    with pytest.raises(Exception) as info:
        real(err, False, False)
    fake = download_error(err)
    assert type(fake) is type(info.value)
    assert fake.__cause__ is (info.value.__cause__ if fake is not err else fake.__cause__)


def test_hub_error_is_the_real_clients_classification() -> None:
    url = "https://huggingface.co/api/kernels/a/b/revision/main"
    assert type(hub_error("GET", url, 403, code="GatedRepo")) is hf_errors.GatedRepoError
    assert type(hub_error("GET", url, 404, code="EntryNotFound")) is \
        hf_errors.RemoteEntryNotFoundError
    assert type(hub_error("GET", url, 503)) is hf_errors.HfHubHTTPError


def test_unchanged_files_make_no_commit(remote: FakeHfApi, hf: HfHub, tmp_path: Path,
                                        caplog) -> None:
    """The client drops additions the branch already holds, and with nothing left makes
    no commit: publishing the same build again leaves the version where it is."""
    import logging

    c1 = _publish(hf, tmp_path / "p", card="# relu\n", module_id="_relu_same")
    main = hf.branches(REPO)["main"]
    caplog.set_level(logging.INFO, logger="kernelforge")
    rev = hf.publish(REPO, tmp_path / "p", version=1, card="# relu\n")
    assert rev.commit == c1 and rev.parent == c1 and hf.branches(REPO)["main"] == main
    assert "already holds this build" in caplog.text
    # a change to one file commits, and the unchanged ones stay as they were
    (tmp_path / "p" / "build" / "torch-cpu" / "metadata.json").write_text(
        (tmp_path / "p" / "build" / "torch-cpu" / "metadata.json").read_text() + "\n")
    assert hf.publish(REPO, tmp_path / "p", version=1).commit != c1


# --- the Hub's answers reach the user as HubErrors with the right advice -----------------


def test_a_concurrent_publish_is_refused_with_advice_to_retry(remote: FakeHfApi, hf: HfHub,
                                                              tmp_path: Path,
                                                              monkeypatch) -> None:
    """Another publish lands between HfHub reading the branch and committing: the Hub
    refuses the commit (parent_commit), and the error says to try again."""
    first = _publish(hf, tmp_path / "p1", module_id=uid("a"))
    real_commit = remote.create_commit

    def racing(repo_id, operations, **kwargs):
        if kwargs.get("revision") == "v1" and kwargs.get("parent_commit"):
            real_commit(repo_id, [CommitOperationAdd(path_in_repo="build/other.txt",
                                                     path_or_fileobj=b"x")],
                        commit_message="someone else", repo_type="kernel", revision="v1")
        return real_commit(repo_id, operations, **kwargs)

    monkeypatch.setattr(remote, "create_commit", racing)
    make_variant(tmp_path / "p2", "torch-cpu", module_id=uid("b"))
    with pytest.raises(HubError, match=r"(?s)publishing branch v1 for kernels-test/relu on "
                                       r"the Hugging Face Hub failed: .*A commit has "
                                       r"happened since.*; the "
                                       r"branch moved while this ran .*try again") as info:
        hf.publish(REPO, tmp_path / "p2", version=1)
    assert "check the network" not in str(info.value)
    assert hf.branches(REPO)["v1"] != first  # the other publish stands


@pytest.mark.parametrize(("status", "advice"), [
    (409, "the branch moved while this ran"),
    (400, "the Hub refused the request as invalid"),
])
def test_commit_refusals_get_their_own_advice(hf: HfHub, remote: FakeHfApi, tmp_path: Path,
                                              monkeypatch, status: int, advice: str) -> None:
    def refuse(repo_id, operations, **kwargs):
        raise hub_error("POST", f"https://huggingface.co/api/kernels/{repo_id}/commit/v1",
                        status, message="refused")

    monkeypatch.setattr(remote, "create_commit", refuse)
    make_variant(tmp_path / "p", "torch-cpu")
    with pytest.raises(HubError, match=advice) as info:
        hf.publish(REPO, tmp_path / "p", version=1)
    assert "check the network" not in str(info.value)


def test_a_gated_repository_is_said_to_be_gated(hf: HfHub, remote: FakeHfApi, tmp_path: Path,
                                                monkeypatch) -> None:
    commit = _publish(hf, tmp_path / "p")
    hf.variants(REPO, commit)  # the listing is cached; the files are not

    def gated(repo_id, filename, **kwargs):
        raise hub_error("HEAD", f"https://huggingface.co/kernels/{repo_id}/resolve/{commit}/"
                        f"{filename}", 403, code="GatedRepo", message="gated")

    monkeypatch.setattr(remote, "hf_hub_download", gated)
    with pytest.raises(HubError, match=r"repository 'kernels-test/relu' on the Hugging Face "
                                       r"Hub is gated: ask for access") as info:
        hf.read_file(REPO, commit, "build/torch-cpu/metadata.json")
    assert "not found" not in str(info.value)


def test_a_file_missing_from_the_hub_is_named_not_blamed_on_the_network(
    hf: HfHub, remote: FakeHfApi, tmp_path: Path
) -> None:
    commit = _publish(hf, tmp_path / "p")
    loader.kernel_info(REPO, version=1, hub=hf)  # listing and metadata cached, no variant
    remote.tamper(REPO, commit, "build/torch-cpu/helper.py", None)
    with pytest.raises(HubError, match=r"downloading build/torch-cpu/helper.py: no such file "
                                       r"in kernels-test/relu on the Hugging Face Hub") as info:
        hf.fetch_variant(REPO, commit, "torch-cpu")
    assert "check the network" not in str(info.value)
    assert hf.cache.entries() == []


def test_huggingface_hub_offline_mode_is_named_for_downloads(hf: HfHub, remote: FakeHfApi,
                                                              tmp_path: Path,
                                                              monkeypatch) -> None:
    """huggingface_hub read HF_HUB_OFFLINE when imported, HfHub reads it now: a download
    then fails as a file missing from huggingface_hub's cache, and the error says why."""
    commit = _publish(hf, tmp_path / "p")
    hf.variants(REPO, commit)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HubError, match=r"huggingface_hub is in offline mode .*use "
                                       r"HfHub\(offline=True\)") as info:
        hf.fetch_variant(REPO, commit, "torch-cpu")
    assert isinstance(info.value.__cause__, hf_errors.LocalEntryNotFoundError)
    with pytest.raises(HubError, match=r"huggingface_hub is in offline mode"):
        hf.branches(REPO)  # an API call: OfflineModeIsEnabled


@pytest.mark.parametrize(("hub_offline", "transformers_offline"), [
    ("1", None), (None, "1"), ("0", "1"), ("", "yes"), ("true", "0"), (None, None),
    ("no", None), (None, "ON"),
])
def test_offline_mode_is_read_as_huggingface_hub_reads_it(monkeypatch, hub_offline,
                                                          transformers_offline) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    for name, value in (("HF_HUB_OFFLINE", hub_offline),
                        ("TRANSFORMERS_OFFLINE", transformers_offline)):
        monkeypatch.delenv(name, raising=False)
        if value is not None:
            env[name] = value
            monkeypatch.setenv(name, value)
    theirs = subprocess.run(
        [sys.executable, "-c", "from huggingface_hub import constants as c; "
                               "print(c.HF_HUB_OFFLINE)"],
        env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert str(hf_offline()) == theirs
    if hf_offline() and not hub_offline:
        with pytest.raises(HubError, match="TRANSFORMERS_OFFLINE is set"):
            HfHub(api=object()).branches(REPO)


# --- a repository HfHub publishes is one Hugging Face's kernels loads --------------------


def test_kernels_loads_what_hf_hub_publishes(hf: HfHub, remote: FakeHfApi, tmp_path: Path,
                                             key, monkeypatch) -> None:
    """``kernels`` lists the variants of a published revision, reads the chosen one's
    metadata.json with its own parser, and downloads exactly the files HfHub does."""
    kernels_resolver = pytest.importorskip("kernels.resolver")
    from kernels.variants import get_variants

    commit = _publish(hf, tmp_path / "p", key=key, card="# relu\n", module_id=uid("kn"))
    # bytecode a careless build shipped: neither loader may take it
    remote.tamper(REPO, commit, "build/torch-cpu/__pycache__/helper.cpython-311.pyc", b"x")
    monkeypatch.setattr(kernels_resolver, "CACHE_DIR", str(tmp_path / "hf-cache"))
    names = {v.variant_str for v in get_variants(remote, repo_id=REPO, revision=commit)}
    assert names == {"torch-cpu"}  # build/torch-cpu.sig is a file, not a variant
    found = kernels_resolver.resolve_hub_kernel(REPO, api=remote, backend="cpu",
                                                revision=commit)
    assert found.variant_str == "torch-cpu"
    theirs = found.install(api=remote).variant_path
    ours = hf.fetch_variant(REPO, commit, "torch-cpu").path

    def files(root: Path) -> set[str]:
        return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}

    assert files(theirs) == files(ours) and "metadata.json" in files(ours)
    assert all((theirs / f).read_bytes() == (ours / f).read_bytes() for f in files(ours))
