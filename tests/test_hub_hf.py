"""The Hugging Face Hub backend (kernelforge.hub.hf) against a fake HfApi: publishing,
refs, downloading only the chosen variant, the cache, offline mode, errors."""

from __future__ import annotations

import dataclasses
import errno
import functools
import json
import logging
import os
import re
import sys
from pathlib import Path
from unittest import mock

import pytest
from huggingface_hub import RepoFile
from huggingface_hub.errors import OfflineModeIsEnabled
from kf_sharing import (
    SO_NAME,
    CountingApi,
    FakeHfApi,
    hub_error,
    isolate,
    make_variant,
    uid,
    upload_error,
    without_token,
)

from kernelforge import loader, revisions, signing, trust
from kernelforge.errors import HubError, IntegrityError, TrustError
from kernelforge.hub import Hub, LocalHub, as_hub
from kernelforge.hub.hf import HfHub

pytestmark = pytest.mark.usefixtures("cpu_system")

REPO = "kernels-test/relu"


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path: Path) -> dict[str, Path]:
    return isolate(monkeypatch, tmp_path)


@pytest.fixture(autouse=True)
def waits(monkeypatch) -> list[float]:
    """The waits between the tries of a read the Hub failed, recorded, not slept."""
    slept: list[float] = []
    monkeypatch.setattr("kernelforge.hub.hf._sleep", slept.append)
    return slept


@pytest.fixture
def key(tmp_path: Path) -> signing.SigningKey:
    k = signing.generate_key(tmp_path / "k.pem")
    trust.add_key(k.public.text, name="ci", repos=("kernels-test/*",))
    return k


def publish(hf: HfHub, root: Path, version: int = 1, key=None, **variants) -> str:
    for name, kw in variants.items():
        make_variant(root, name.replace("_", "-"), version=version, **kw)
    return hf.publish(REPO, root, version=version, signer=key).commit


def test_hf_hub_is_a_hub_and_as_hub_knows_it(hf: HfHub, monkeypatch) -> None:
    assert isinstance(hf, Hub) and hf.kind == "hf"
    assert isinstance(as_hub("hf"), HfHub)
    monkeypatch.setenv("KERNELFORGE_HUB", "hf")
    assert isinstance(as_hub(None), HfHub)


def test_publish_makes_one_commit_on_the_version_branch(hf: HfHub, remote: FakeHfApi,
                                                        tmp_path: Path, key) -> None:
    c1 = publish(hf, tmp_path / "p1", key=key, torch_cpu={}, torch_universal={})
    files = remote.list_repo_files(REPO, revision=c1, repo_type="kernel")
    assert "build/torch-cpu/metadata.json" in files and "build/torch-cpu.sig" in files
    assert f"build/torch-universal/{SO_NAME}" in files
    assert hf.branches(REPO)["v1"] == c1 and "main" in hf.branches(REPO)
    # the next publish drops variants no longer built, in the same commit
    c2 = publish(hf, tmp_path / "p2", torch_cpu={"value": 2})
    files = remote.list_repo_files(REPO, revision=c2, repo_type="kernel")
    assert not any(f.startswith("build/torch-universal") for f in files)
    assert "build/torch-cpu.sig" not in files  # unsigned publish: the old signature goes
    assert hf.variants(REPO, c2) == ["torch-cpu"] and hf.variants(REPO, c1) == [
        "torch-cpu", "torch-universal"]


def test_publish_calls_the_hub_api_as_documented(tmp_path: Path, env) -> None:
    api = mock.MagicMock()
    api.list_repo_refs.return_value = mock.Mock(
        branches=[mock.Mock(target_commit="a" * 40), mock.Mock(target_commit="b" * 40)],
        tags=[])
    api.list_repo_refs.return_value.branches[0].name = "main"
    api.list_repo_refs.return_value.branches[1].name = "v3"
    api.list_repo_tree.return_value = [RepoFile(path=p, size=1, oid="0" * 40)
                                       for p in ("build/torch-cuda/x.py", "README.md")]
    api.create_commit.return_value = mock.Mock(oid="c" * 40)
    make_variant(tmp_path / "p", "torch-cpu", version=3)
    rev = HfHub(api=api, cache=env["cache"]).publish(REPO, tmp_path / "p", version=3,
                                                     message="m")
    assert rev.commit == "c" * 40 and rev.parent == "b" * 40 and rev.branch == "v3"
    api.create_repo.assert_called_once_with(REPO, repo_type="kernel")
    api.create_branch.assert_called_once_with(REPO, branch="v3", repo_type="kernel")
    kwargs = api.create_commit.call_args.kwargs
    assert (kwargs["revision"], kwargs["parent_commit"], kwargs["repo_type"]) == (
        "v3", "b" * 40, "kernel")
    ops = {type(op).__name__: [] for op in kwargs["operations"]}
    for op in kwargs["operations"]:
        ops[type(op).__name__].append(op.path_in_repo)
    assert sorted(ops["CommitOperationAdd"]) == [
        "build/torch-cpu/__init__.py", f"build/torch-cpu/{SO_NAME}",
        "build/torch-cpu/helper.py", "build/torch-cpu/metadata.json"]
    assert ops["CommitOperationDelete"] == ["build/torch-cuda/x.py"]


def test_load_downloads_only_the_chosen_variant_once(hf: HfHub, remote: FakeHfApi,
                                                     tmp_path: Path, key) -> None:
    module_id = uid("hf")
    publish(hf, tmp_path / "p", key=key, torch_cpu={"module_id": module_id},
            torch_cuda={"module_id": uid("cuda")})
    module = loader.get_kernel(REPO, version=1, hub=hf, backend="cpu")
    assert module.__name__ == module_id and module.helper.double(2) == 4
    fetched = remote.fetches()
    assert fetched and all("torch-cuda/" not in f for f in fetched)
    assert len(fetched) == len(set(fetched))  # each file once
    info = loader.kernel_info(REPO, version=1, hub=hf, backend="cpu")
    assert info.path == Path(module.__file__).parent and info.hub == "Hugging Face Hub"
    assert info.trust.startswith("trust: allowed, signed by trusted key")
    # a second process (a fresh hub object, same cache) finds everything cached
    again = HfHub(api=remote, cache=hf.cache.root)
    before = len(remote.fetches())
    assert loader.get_kernel(REPO, version=1, hub=again, backend="cpu") is module
    assert loader.kernel_info(REPO, version=1, hub=again, backend="cpu").variant == "torch-cpu"
    assert len(remote.fetches()) == before


def test_unsigned_remote_kernel_needs_explicit_allowance(hf: HfHub, tmp_path: Path) -> None:
    publish(hf, tmp_path / "p", torch_cpu={})
    with pytest.raises(TrustError, match="no signature"):
        loader.get_kernel(REPO, version=1, hub=hf)
    assert loader.get_kernel(REPO, version=1, hub=hf, trust_remote_code=[REPO]).VALUE == 1


def test_untrusted_signer_is_refused(hf: HfHub, tmp_path: Path) -> None:
    stranger = signing.generate_key(tmp_path / "stranger.pem")
    publish(hf, tmp_path / "p", key=stranger, torch_cpu={})
    with pytest.raises(TrustError, match=f"signed by key {stranger.public.key_id}, which is "
                       "not in the trust store"):
        loader.get_kernel(REPO, version=1, hub=hf)


def test_signing_a_build_that_records_no_version_is_refused(hf: HfHub, remote: FakeHfApi,
                                                          tmp_path: Path, key) -> None:
    with pytest.raises(TrustError, match=r"cannot sign variant\(s\) torch-cpu: .*records no "
                       r"version.*rebuild with 'kernelforge build'"):
        make_variant(tmp_path / "p", "torch-cpu", version=None)
        hf.publish(REPO, tmp_path / "p", version=1, signer=key)
    assert not (remote.root / "repos" / REPO).exists()  # refused before any upload

def test_signed_kernel_without_digest_is_refused(hf: HfHub, remote: FakeHfApi,
                                                 tmp_path: Path, key) -> None:
    with pytest.raises(TrustError, match=r"cannot sign variant\(s\) torch-cpu: .*no file "
                                         r"digests.*rebuild with 'kernelforge build'"):
        publish(hf, tmp_path / "p", key=key, torch_cpu={"with_digest": False})
    assert not (remote.root / "repos" / REPO).exists()  # refused before any upload
    # a signature over digest-less metadata made some other way is refused at load
    commit = hf.publish(REPO, tmp_path / "p", version=1).commit
    meta = remote.tree(REPO, commit) / "build" / "torch-cpu" / "metadata.json"
    remote.tamper(REPO, commit, "build/torch-cpu.sig",
                  key.sign_variant("torch-cpu", meta.read_bytes(), repo_id=REPO))
    with pytest.raises(TrustError, match="records no file digests"):
        loader.get_kernel(REPO, version=1, hub=hf)


def test_offline_mode_uses_only_the_cache(hf: HfHub, remote: FakeHfApi, tmp_path: Path,
                                          key, monkeypatch) -> None:
    module_id = uid("off")
    c1 = publish(hf, tmp_path / "p", key=key, torch_cpu={"module_id": module_id})
    cold = HfHub(api=remote, cache=tmp_path / "cold")
    remote.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError, match="not in the download cache.*HF_HUB_OFFLINE"):
        loader.get_kernel(REPO, version=1, hub=cold)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(HubError, match="network"):  # down and not offline: a clear error
        loader.get_kernel(REPO, version=1, hub=cold)
    remote.come_up()
    loader.kernel_info(REPO, version=1, hub=hf)  # seen online once: refs, listing, metadata
    hf.fetch_variant(REPO, c1, "torch-cpu")
    remote.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = HfHub(api=remote, cache=hf.cache.root)
    assert offline.offline and "offline" in offline.describe()
    assert loader.get_kernel(REPO, version=1, hub=offline).__name__ == module_id
    assert offline.resolve(REPO, c1[:8]) == c1
    assert offline.resolve(REPO, c1[:8].upper()) == c1  # commit ids are hex, in either case


def test_offline_a_version_never_downloaded_is_said_to_be_missing_from_the_cache(
    hf: HfHub, remote: FakeHfApi, tmp_path: Path, key, monkeypatch
) -> None:
    """Offline, the newest version (v2) was never downloaded: the error says so, rather
    than that the repository holds no variants."""
    publish(hf, tmp_path / "p1", key=key, torch_cpu={"module_id": uid("o1")})
    publish(hf, tmp_path / "p2", version=2, key=key, torch_cpu={"module_id": uid("o2")})
    assert loader.get_kernel(REPO, version=1, hub=hf).VALUE == 1  # cached online
    remote.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = HfHub(api=remote, cache=hf.cache.root)
    with pytest.raises(HubError, match="not in the download cache"):
        loader.get_kernel(REPO, hub=offline)
    assert loader.get_kernel(REPO, version=1, hub=offline).VALUE == 1


def test_offline_a_cached_version_loads_after_main_moved(
    hf: HfHub, remote: FakeHfApi, tmp_path: Path, key, monkeypatch
) -> None:
    """Offline, a version loaded while online loads again after a publish with a card
    moved ``main`` (the refs were listed again online by it): the status on the new
    ``main`` was kept with those refs, so the load knows there is no redirect."""
    publish(hf, tmp_path / "p1", key=key, torch_cpu={"module_id": uid("m1")})
    assert loader.get_kernel(REPO, version=1, hub=hf).VALUE == 1
    make_variant(tmp_path / "p2", "torch-cpu", version=2, module_id=uid("m2"))
    hf.publish(REPO, tmp_path / "p2", version=2, signer=key, card="# relu\n")
    remote.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loader._by_call.clear()
    offline = HfHub(api=remote, cache=hf.cache.root)
    assert loader.get_kernel(REPO, version=1, hub=offline).VALUE == 1
    assert loader.has_kernel(REPO, version=1, hub=offline)


def test_refs_whose_status_could_not_be_read_are_not_kept(
    hf: HfHub, remote: FakeHfApi, tmp_path: Path, key, monkeypatch
) -> None:
    """The network drops between listing the refs and reading the status on the new
    ``main``: the refs kept stay those before (whose status is known), so a later
    offline load of what was loaded before still works."""
    from huggingface_hub import CommitOperationAdd

    publish(hf, tmp_path / "p1", key=key, torch_cpu={"module_id": uid("f1")})
    assert loader.get_kernel(REPO, version=1, hub=hf).VALUE == 1
    remote.create_commit(REPO, [CommitOperationAdd(path_in_repo="README.md",
                                                   path_or_fileobj=b"# docs\n")],
                         commit_message="card", repo_type="kernel", revision="main")
    real = remote.list_repo_refs

    def refs_then_down(*args, **kwargs):
        got = real(*args, **kwargs)
        remote.go_down()
        return got

    monkeypatch.setattr(remote, "list_repo_refs", refs_then_down)
    assert 1 in hf.versions(REPO)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loader._by_call.clear()
    offline = HfHub(api=remote, cache=hf.cache.root)
    assert loader.get_kernel(REPO, version=1, hub=offline).VALUE == 1


def test_offline_a_redirect_kept_with_the_refs_is_followed(
    hf: HfHub, remote: FakeHfApi, tmp_path: Path, key, monkeypatch
) -> None:
    """The publisher moved the kernel (a redirect on ``main``) and ``main`` moved again
    since; the refs listed online keep the status of the ``main`` they name, so an
    offline load still follows the redirect, and an offline lock pins its target."""
    from huggingface_hub import CommitOperationAdd

    from kernelforge.lock import lock_project, read_lock

    other = "kernels-test/relu-new"
    make_variant(tmp_path / "old", "torch-cpu", value=1, module_id=uid("old"))
    hf.publish(REPO, tmp_path / "old", version=1, signer=key, card="# old\n")
    make_variant(tmp_path / "new", "torch-cpu", value=2, module_id=uid("new"))
    hf.publish(other, tmp_path / "new", version=1, signer=key, card="# new\n")
    assert loader.get_kernel(REPO, version=1, hub=hf).VALUE == 1
    status = f'kind = "redirect"\ndestination = "{other}"\n'.encode()
    remote.create_commit(REPO, [CommitOperationAdd(path_in_repo="kernel-status.toml",
                                                   path_or_fileobj=status)],
                         commit_message="moved", repo_type="kernel", revision="main")
    remote.create_commit(REPO, [CommitOperationAdd(path_in_repo="README.md",
                                                   path_or_fileobj=b"# moved\n")],
                         commit_message="card", repo_type="kernel", revision="main")
    assert loader.get_kernel(other, version=1, hub=hf).VALUE == 2  # cached
    hf.versions(REPO)  # the refs listed online again, nothing of REPO loaded
    remote.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loader._by_call.clear()
    offline = HfHub(api=remote, cache=hf.cache.root)
    assert loader.get_kernel(REPO, version=1, hub=offline).VALUE == 2
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    assert read_lock(lock_project(project, hub=offline).path).require(REPO).repo == other
    # a status the cache refuses (a link put in its place) is refused, not skipped
    main = offline.branches(REPO)["main"]
    cached = offline.cache.cached_file(REPO, main, "kernel-status.toml")
    assert cached is not None
    copy = tmp_path / "elsewhere.toml"
    copy.write_bytes(cached.read_bytes())
    os.chmod(cached.parent, 0o755)
    cached.unlink()
    cached.symlink_to(copy)
    loader._by_call.clear()
    with pytest.raises(HubError, match="link"):
        loader.get_kernel(REPO, version=1, hub=offline)


def _locked_and_downloaded(remote: FakeHfApi, tmp_path: Path, cache: Path) -> Path:
    """A project pinning version 1 of REPO, locked with a download cache of its own, and
    what its lock pins fetched by 'kernelforge download' into ``cache``: its lock file."""
    from kernelforge.lock import download_locked, lock_project

    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    lock = lock_project(project, hub=HfHub(api=remote, cache=tmp_path / "a")).path
    download_locked(lock, hub=HfHub(api=remote, cache=cache))
    return lock


def test_offline_a_full_commit_loads_from_the_cache_without_refs(
    hf: HfHub, remote: FakeHfApi, tmp_path: Path, key, monkeypatch
) -> None:
    """A download cache that holds a commit's variant but no refs (``kernelforge
    download`` keeps none) serves ``revision=<full commit>`` offline, as Hugging Face's
    loader does; a version still needs the refs."""
    c1 = publish(hf, tmp_path / "p1", key=key, torch_cpu={"module_id": uid("c1")})
    _locked_and_downloaded(remote, tmp_path, tmp_path / "cold")
    remote.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = HfHub(api=remote, cache=tmp_path / "cold")
    assert offline.cache.load_refs(REPO) is None
    assert loader.get_kernel(REPO, revision=c1, hub=offline).VALUE == 1
    with pytest.raises(HubError, match="not in the download cache"):
        loader.get_kernel(REPO, version=1, hub=offline)


def test_offline_a_repository_id_in_other_case_finds_the_cache(
    hf: HfHub, remote: FakeHfApi, tmp_path: Path, key, monkeypatch
) -> None:
    """Repository ids ignore case on the Hub, so what a load of the id as spelled once
    cached serves an offline load of it spelled another way."""
    module_id = uid("case")
    publish(hf, tmp_path / "p", key=key, torch_cpu={"module_id": module_id})
    assert loader.get_kernel(REPO, version=1, hub=hf).__name__ == module_id
    remote.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = HfHub(api=remote, cache=hf.cache.root)
    assert loader.get_kernel(REPO.upper(), version=1, hub=offline).__name__ == module_id
    assert loader.get_kernel("Kernels-Test/Relu", hub=offline).__name__ == module_id
    assert sorted(p.name for p in (hf.cache.root / "variants").iterdir()) == ["kernels-test"]


def test_missing_repository_and_revision(hf: HfHub, tmp_path: Path) -> None:
    with pytest.raises(HubError, match="repository 'nobody/here' not found on the Hugging Face"):
        loader.get_kernel("nobody/here", version=1, hub=hf)
    assert not hf.has_repo("nobody/here")
    publish(hf, tmp_path / "p", torch_cpu={})
    with pytest.raises(HubError, match="revision 'nope': the revision does not exist"):
        hf.resolve(REPO, "nope")
    assert hf.read_file(REPO, hf.resolve(REPO, "v1"), "build/torch-cpu.sig") is None


def test_remote_files_that_do_not_match_their_digest_are_never_cached(
    hf: HfHub, remote: FakeHfApi, tmp_path: Path
) -> None:
    c = publish(hf, tmp_path / "p", torch_cpu={})
    remote.tamper(REPO, c, "build/torch-cpu/helper.py", b"evil = True\n")
    with pytest.raises(IntegrityError, match="changed: helper.py") as info:
        loader.get_kernel(REPO, version=1, hub=hf, trust_remote_code=True)
    # named by what was downloaded, not by the temporary folder (gone), with the fix
    said = str(info.value)
    assert said.startswith(f"{REPO} variant torch-cpu at {c[:12]}: the files the Hugging "
                           "Face Hub served do not match the digests its metadata.json "
                           "records:\n  changed: helper.py\nnothing was cached; try "
                           "again"), said
    assert str(hf.cache.root / "tmp") not in said, said
    assert hf.cache.entries() == []
    assert not list((hf.cache.root / "tmp").iterdir())


def test_publish_refuses_a_changed_build_in_publish_words(hf: HfHub, remote: FakeHfApi,
                                                         tmp_path: Path, capsys,
                                                         monkeypatch) -> None:
    """HfHub.publish refuses a build changed after it was built as LocalHub.publish does:
    "refusing to publish" with the fix, never the loader's "refusing to load"; the CLI
    shows the hub's own message."""
    from kernelforge.cli import main

    root = _cli_project(tmp_path)
    vdir = root / "build" / "torch-cpu"
    (vdir / "helper.py").write_text("tampered = True\n")
    for where in (root, root / "build"):
        with pytest.raises(IntegrityError) as info:
            hf.publish(REPO, where, version=1)
        text = str(info.value)
        assert text.startswith(f"refusing to publish {vdir}: its files do not match the "
                               "digests its metadata.json records (they changed after the "
                               "build):\n  changed: helper.py\n")
        assert text.endswith(f"rebuild it (kernelforge build {root}), then publish again")
        assert info.value.where == vdir
    with pytest.raises(IntegrityError) as local:
        LocalHub(tmp_path / "hub").publish(REPO, root, version=1)
    assert str(local.value) == text  # one wording for both hubs
    monkeypatch.setattr("kernelforge.hub.as_hub", lambda hub: hf)
    assert main(["publish", str(root), "--repo", REPO, "--hub", "hf"]) == 1
    assert capsys.readouterr().err == f"error: {text}\n"
    assert not (remote.root / "repos" / REPO).exists()  # refused before any call


def test_publish_names_an_unreadable_build_file(hf: HfHub, tmp_path: Path,
                                                monkeypatch) -> None:
    import errno

    root = _cli_project(tmp_path)
    helper = root / "build" / "torch-cpu" / "__init__.py"
    real = Path.read_bytes

    def read_bytes(path: Path) -> bytes:
        if path == helper:  # root reads any file: fake the refusal a chmod 000 would give
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    with pytest.raises(HubError) as info:
        hf.publish(REPO, root, version=1)
    assert str(info.value) == (
        f"{helper}: cannot read this file of the build being published (Permission denied); "
        f"nothing was published. Make it readable, or rebuild (kernelforge build {root}), "
        "then publish again")


def test_versions_command_lists_remote_branches(hf: HfHub, tmp_path: Path, capsys,
                                                monkeypatch) -> None:
    from kernelforge import cli

    publish(hf, tmp_path / "p", torch_cpu={})
    monkeypatch.setattr("kernelforge.hub.as_hub", lambda hub: hf)
    assert cli.main(["versions", REPO, "--hub", "hf"]) == 0
    out = capsys.readouterr().out
    assert "on the Hugging Face Hub" in out and "v1" in out and "torch-cpu" in out


def test_cache_entry_record(hf: HfHub, tmp_path: Path, key, caplog) -> None:
    c = publish(hf, tmp_path / "p", key=key, torch_cpu={})
    caplog.set_level(logging.INFO)
    got = hf.fetch_variant(REPO, c, "torch-cpu")
    assert got.fetched
    entry = json.loads((got.path.parent / "entry.json").read_text())
    assert set(entry["files"]) == {"__init__.py", "helper.py", SO_NAME, "metadata.json"}
    assert (hf.cache.entries()) == [(REPO, c, "torch-cpu")]
    assert not hf.fetch_variant(REPO, c, "torch-cpu").fetched


def _cli_project(tmp_path: Path, version: int = 1, folder: str = "cli-relu") -> Path:
    root = tmp_path / folder
    (root / "torch-ext" / "relu").mkdir(parents=True)
    (root / "torch-ext" / "relu" / "__init__.py").write_text("")
    (root / "build.toml").write_text(f'[general]\nname = "relu"\nversion = {version}\n'
                                     'license = "Apache-2.0"\nbackends = ["cpu"]\n\n'
                                     "[torch-noarch]\n")
    make_variant(root, "torch-cpu", module_id=uid("cli"), version=version)
    return root


def test_cli_publish_signed_to_the_remote_and_load(hf: HfHub, tmp_path: Path, capsys,
                                                    monkeypatch, env) -> None:
    from kernelforge.cli import main

    root = _cli_project(tmp_path)
    assert main(["keygen", "--name", "release"]) == 0
    monkeypatch.setattr("kernelforge.hub.as_hub", lambda hub: hf if hub == "hf" else
                        LocalHub(hub))
    assert main(["publish", str(root), "--repo", REPO, "--hub", "hf", "--sign", "release"]) == 0
    out = capsys.readouterr().out
    assert "published kernels-test/relu version 1" in out and "signed with key" in out
    assert "hub: Hugging Face Hub" in out
    # the key keygen made is trusted by its owner: the signed remote kernel loads
    assert loader.get_kernel(REPO, version=1, hub=hf).VALUE == 1
    # and the same works for a local hub another user reads
    assert main(["publish", str(root), "--repo", REPO, "--hub", str(env["hub"]),
                 "--sign", str(env["config"] / "keys" / "release.pem")]) == 0
    commit = LocalHub(env["hub"]).resolve(REPO, "v1")
    assert LocalHub(env["hub"]).read_file(REPO, commit, "build/torch-cpu.sig")


# --- network failures, whichever HTTP client huggingface_hub uses ------------------------


def _client_connect_error() -> Exception:
    """The ConnectError of the HTTP client the installed huggingface_hub uses (httpx2 for
    huggingface_hub 2.x, httpx before)."""
    import importlib

    from huggingface_hub import errors as hf_errors

    client = importlib.import_module(hf_errors.HTTPError.__module__.split(".")[0])
    return client.ConnectError("[Errno -2] Name or service not known")


def _http_status(status: int) -> Exception:
    from types import SimpleNamespace

    from huggingface_hub.errors import HfHubHTTPError

    return HfHubHTTPError(f"{status} from the Hub", response=SimpleNamespace(
        status_code=status, headers={}, request=None))


# a transport error of a client not installed here, known by its module's name
_FutureClientError = type("ConnectError", (Exception,), {"__module__": "httpx3._exceptions"})

NETWORK_ERRORS = [
    (_client_connect_error, "check the network, or set HF_HUB_OFFLINE=1"),
    (lambda: _http_status(503), "the Hub is busy or down: try again later"),
    (lambda: _http_status(401), "log in with 'hf auth login'"),
    (lambda: OfflineModeIsEnabled("offline mode is enabled"), "use HfHub(offline=True)"),
]


@pytest.mark.parametrize(("make", "advice"), NETWORK_ERRORS,
                         ids=["client", "503", "401", "hf-offline"])
def test_network_errors_become_hub_errors_with_advice(hf: HfHub, remote: FakeHfApi, make,
                                                      advice, capsys, monkeypatch) -> None:
    from kernelforge import cli

    def fail(*args, **kwargs):
        raise make()

    monkeypatch.setattr(remote, "list_repo_refs", fail)
    with pytest.raises(HubError, match=f"listing refs for {REPO} on the Hugging Face Hub "
                                       f"failed: .*; .*{re.escape(advice)}") as info:
        loader.get_kernel(REPO, version=1, hub=hf)
    assert type(info.value.__cause__).__name__ in ("ConnectError", "HfHubHTTPError",
                                                   "OfflineModeIsEnabled")
    assert loader.has_kernel(REPO, version=1, hub=hf) is False  # get_kernel would fail
    monkeypatch.setattr("kernelforge.hub.as_hub", lambda hub: hf)
    assert cli.main(["versions", REPO, "--hub", "hf"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and advice in err and "Traceback" not in err


@pytest.mark.parametrize(("make", "advice"), [
    (_client_connect_error, "check the network and try again"),
    (lambda: _http_status(503), "the Hub is busy or down: try again later"),
], ids=["client", "503"])
@pytest.mark.parametrize(("method", "what"), [("create_repo", "creating the repository"),
                                              ("list_repo_refs", "listing refs")])
def test_a_failed_publish_is_not_pointed_to_the_download_cache(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, make, advice, method, what,
        monkeypatch) -> None:
    """The download cache stands in for loads only: a publish that cannot reach the Hub,
    in a write or in a read of its own, gets advice that fits a publish."""
    def fail(*args, **kwargs):
        raise make()

    monkeypatch.setattr(remote, method, fail)
    with pytest.raises(HubError, match=what) as info:
        publish(hf, tmp_path / "p", torch_cpu={"module_id": uid("w")})
    assert advice in str(info.value) and "HF_HUB_OFFLINE" not in str(info.value)


def test_a_failed_publish_of_a_new_version_leaves_no_empty_version_branch(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, monkeypatch) -> None:
    """The Hub needs the branch before the commit: when the commit fails, the branch this
    publish made is deleted again, so that loads pinning no version keep the newest
    version that holds a build (an empty v2 would be taken, and hold no variant)."""
    c1 = publish(hf, tmp_path / "p1", torch_cpu={"module_id": uid("nb")})
    commit = remote.create_commit

    def fail(*args, **kwargs):
        raise _client_connect_error()

    monkeypatch.setattr(remote, "create_commit", fail)
    with pytest.raises(HubError, match="publishing branch v2 for .* check the network"):
        publish(hf, tmp_path / "p2", version=2, torch_cpu={"module_id": uid("nb2")})
    assert set(hf.branches(REPO)) == {"main", "v1"}
    assert revisions.select(hf, REPO, announce=False).commit == c1
    assert "v2" not in hf.cache.load_refs(REPO)[0]  # nor in the refs an offline load reads
    # a branch that was there before is never deleted, whatever the publish's fate
    with pytest.raises(HubError, match="publishing"):
        publish(hf, tmp_path / "p3", version=1, torch_cpu={"module_id": uid("nb3")})
    assert hf.branches(REPO)["v1"] == c1
    monkeypatch.setattr(remote, "create_commit", commit)
    c2 = publish(hf, tmp_path / "p2", version=2)
    assert revisions.select(hf, REPO, announce=False).commit == c2


@pytest.mark.parametrize(("cause", "advice"), [
    (lambda: hub_error("PUT", "https://storage.example/part", 503),
     "the Hub is busy or down: try again later"),
    (lambda: _client_error("ReadTimeout", "The write operation timed out"),
     "check the network and try again"),
    # the storage's refusal of a signed address (expired): the token is not at fault
    (lambda: hub_error("PUT", "https://storage.example/part", 403,
                       message="Request has expired"),
     "the Hub's storage refused the upload the Hub had allowed (its signed upload address "
     "may have expired): run the same publish again"),
], ids=["503", "timeout", "403"])
def test_a_failed_upload_of_a_large_file_is_a_hub_error_and_publishes_nothing(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, cause, advice, capsys,
        monkeypatch) -> None:
    """huggingface_hub raises a bare RuntimeError (the HTTP or network error as its
    cause) when the upload of an LFS file (the .so) fails: it is the publish's error,
    naming the repository, the branch and the file, not a traceback; the new version's
    branch goes, and the same publish run again completes."""
    from kernelforge import cli

    c1 = publish(hf, tmp_path / "p1", torch_cpu={"module_id": uid("lfs")})
    project = _cli_project(tmp_path, version=2)
    so = f"build/torch-cpu/{SO_NAME}"
    remote.fail_next("create_commit", upload_error(so, cause()))
    monkeypatch.setattr("kernelforge.hub.as_hub", lambda hub: hf)
    assert cli.main(["publish", str(project), "--repo", REPO, "--hub", "hf"]) == 1
    out, err = capsys.readouterr()
    assert "published" not in out and "Traceback" not in err
    assert re.match(rf"error: publishing branch v2 for {REPO} on the Hugging Face Hub failed: "
                    rf"Error while uploading '{re.escape(so)}' to the Hub\. \(.+\); "
                    rf"{re.escape(advice)}", err), err
    assert set(hf.branches(REPO)) == {"main", "v1"} and hf.branches(REPO)["v1"] == c1
    assert cli.main(["publish", str(project), "--repo", REPO, "--hub", "hf"]) == 0
    assert hf.variants(REPO, hf.branches(REPO)["v2"]) == ["torch-cpu"]


def test_a_card_that_main_refuses_says_the_build_is_published_and_a_rerun_finishes(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, capsys, monkeypatch) -> None:
    """The card's commit on main comes after the build's on the version branch (the Hub
    commits to one branch at a time): where it fails, the error says that the version
    holds the build, and the same publish run again updates main without a second
    commit of the build."""
    from kernelforge import cli

    project = _cli_project(tmp_path)
    (project / "README.md").write_text("# relu, new\n")
    commit = remote.create_commit

    def main_down(repo_id, operations, **kwargs):
        if kwargs.get("revision") == "main":
            raise hub_error("POST", f"{remote.endpoint}/api/kernels/{repo_id}/commit/main", 503)
        return commit(repo_id, operations, **kwargs)

    monkeypatch.setattr(remote, "create_commit", main_down)
    monkeypatch.setattr("kernelforge.hub.as_hub", lambda hub: hf)
    argv = ["publish", str(project), "--repo", REPO, "--hub", "hf",
            "--card", str(project / "README.md")]
    assert cli.main(argv) == 1
    out, err = capsys.readouterr()
    v1 = hf.branches(REPO)["v1"]
    assert out == "" and err.startswith(
        f"error: {REPO} v1 holds the build and its card (revision {v1[:12]}), but the card "
        f"on main was not updated: updating the card on main for {REPO} on the Hugging Face "
        "Hub failed: ")
    assert "the Hub is busy or down" in err and "run the same publish again" in err
    assert hf.read_file(REPO, v1, "README.md") == b"# relu, new\n"
    assert hf.read_file(REPO, hf.branches(REPO)["main"], "README.md") is None
    monkeypatch.setattr(remote, "create_commit", commit)
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"unchanged: {REPO} version 1 (branch v1) already holds this build")
    assert hf.branches(REPO)["v1"] == v1
    assert hf.read_file(REPO, hf.branches(REPO)["main"], "README.md") == b"# relu, new\n"


def test_refs_that_cannot_be_listed_after_the_commit_do_not_fail_the_publish(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, caplog, monkeypatch) -> None:
    """The last step of a publish lists the refs again for the download cache: its
    failure is a warning, since the version holds the build already."""
    commit, refs = remote.create_commit, remote.list_repo_refs
    committed: list[str] = []

    def record(repo_id, operations, **kwargs):
        info = commit(repo_id, operations, **kwargs)
        committed.append(info.oid)
        return info

    def list_refs(*args, **kwargs):
        if committed:
            raise _client_connect_error()
        return refs(*args, **kwargs)

    monkeypatch.setattr(remote, "create_commit", record)
    monkeypatch.setattr(remote, "list_repo_refs", list_refs)
    with caplog.at_level(logging.WARNING, logger="kernelforge"):
        rev = hf.publish(REPO, make_variant(tmp_path / "p", module_id=uid("rr")).parent.parent,
                         version=1)
    assert committed == [rev.commit]
    assert (f"{REPO}: published v1 at {rev.commit[:12]}, but the refs kept in the download "
            "cache could not be refreshed") in caplog.text
    monkeypatch.setattr(remote, "list_repo_refs", refs)
    assert hf.branches(REPO)["v1"] == rev.commit


def test_a_publish_that_creates_the_repository_says_so_and_whether_it_is_public(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, caplog, monkeypatch) -> None:
    """The Hub makes a new repository public unless its owner's default is private: the
    publish that created it says so (a typo in the name, or a repository meant to be
    private, is then seen); one that exists is not created again, nor said to be."""
    created = (f"{REPO} did not exist: created it on the Hugging Face Hub as a public "
               "repository (its owner's default), which anyone can see and load from; to "
               "keep it private, make it private in its settings on the Hub")
    with caplog.at_level(logging.INFO, logger="kernelforge"):
        publish(hf, tmp_path / "p1", torch_cpu={"module_id": uid("cr")})
    assert [r.levelname for r in caplog.records if created in r.getMessage()] == ["WARNING"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="kernelforge"):
        publish(hf, tmp_path / "p2", torch_cpu={"module_id": uid("cr2")})
    assert "did not exist" not in caplog.text
    # a repository its owner makes private by default is created without a warning
    info = remote.repo_info
    monkeypatch.setattr(remote, "repo_info", lambda *a, **kw: dataclasses.replace(
        info(*a, **kw), private=True))
    other = "kernels-test/private"
    make_variant(tmp_path / "p3", module_id=uid("cr3"))
    with caplog.at_level(logging.INFO, logger="kernelforge"):
        hf.publish(other, tmp_path / "p3", version=1)
    [record] = [r for r in caplog.records if "did not exist" in r.getMessage()]
    assert record.levelname == "INFO" and "(private: True)" in record.getMessage()


@pytest.mark.parametrize("answer", ["failed", "silent"])
def test_a_created_repository_whose_visibility_is_unknown_is_a_warning(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, caplog, monkeypatch, answer: str) -> None:
    """Where the Hub's answer does not say whether the new repository is private (the read
    fails, or leaves ``private`` out), it may be public: a WARNING sends the user to its
    settings, and the build is published all the same."""
    if answer == "failed":
        remote.fail_next("repo_info", hub_error(
            "GET", f"{remote.endpoint}/api/kernels/{REPO}", 503))
        why = "the Hub is busy or down"
    else:
        info = remote.repo_info
        monkeypatch.setattr(remote, "repo_info", lambda *a, **kw: dataclasses.replace(
            info(*a, **kw), private=None))
        why = "the Hub's answer does not say"
    with caplog.at_level(logging.INFO, logger="kernelforge"):
        c1 = publish(hf, tmp_path / "p1", torch_cpu={"module_id": uid("vis")})
    [record] = [r for r in caplog.records if "did not exist" in r.getMessage()]
    assert record.levelname == "WARNING", record.getMessage()
    assert record.getMessage().startswith(
        f"kernelforge: {REPO} did not exist: created it on the Hugging Face Hub, but could not "
        "read "
        "whether it is public (")
    assert why in record.getMessage() and record.getMessage().endswith(
        "); check its settings on the Hub")
    assert hf.branches(REPO)["v1"] == c1


def test_a_token_that_may_not_create_a_repository_publishes_to_one_that_exists(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, monkeypatch) -> None:
    """The Hub answers 403 to a repository the token may not create in that namespace,
    whether or not it exists: an existing one is published to, and for a missing one
    the refusal is the error, with the fix."""
    publish(hf, tmp_path / "p1", torch_cpu={"module_id": uid("nc")})

    def forbidden(repo_id, **kwargs):
        raise hub_error("POST", f"{remote.endpoint}/api/repos/create", 403,
                        message="You don't have the rights to create a kernel under this "
                                "namespace")

    monkeypatch.setattr(remote, "create_repo", forbidden)
    c2 = publish(hf, tmp_path / "p2", torch_cpu={"module_id": uid("nc2")})
    assert hf.branches(REPO)["v1"] == c2
    make_variant(tmp_path / "p3", module_id=uid("nc3"))
    with pytest.raises(HubError, match=r"(?s)^creating the repository for kernels-test/new "
                                       r"on the Hugging Face Hub failed: .*publishing needs "
                                       r"a token with write access"):
        hf.publish("kernels-test/new", tmp_path / "p3", version=1)


@pytest.mark.parametrize("version", [1, 2], ids=["existing-branch", "new-branch"])
@pytest.mark.parametrize("status", [403, 401])
def test_a_token_that_may_not_write_is_told_to_use_one_that_may(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, version: int, status: int,
        monkeypatch) -> None:
    """A read-only token gets its commit refused (403; 401 for one without the scope,
    that the Hub does not call invalid): the error names the repository and the branch,
    and says that publishing needs a token with write access; the version branch stays
    as it was, and a branch the publish made goes."""
    without_token(monkeypatch, tmp_path)
    monkeypatch.setenv("HF_TOKEN", "hf_read_only_token")
    c1 = publish(hf, tmp_path / "p1", torch_cpu={"module_id": uid("ro")})
    remote.fail_next("create_commit", hub_error(
        "POST", f"{remote.endpoint}/api/kernels/{REPO}/preupload/v{version}", status,
        message="You don't have the rights to create a commit on this repository"))
    with pytest.raises(HubError) as info:
        publish(hf, tmp_path / "p2", version=version,
                torch_cpu={"module_id": uid("ro2")})
    message = str(info.value)
    assert message.startswith(f"publishing branch v{version} for {REPO} on the Hugging Face "
                              "Hub failed: ")
    assert message.endswith("publishing needs a token with write access to the repository "
                            "(a read-only token loads but cannot publish): log in with 'hf "
                            "auth login' with a write token, or pass one as token= (HF_TOKEN, "
                            "when set, is used before the login)")
    assert hf.branches(REPO) == {"main": hf.branches(REPO)["main"], "v1": c1}


def _refuse(remote: FakeHfApi, method: str, status: int, monkeypatch) -> None:
    """Make ``method`` (create_repo, create_branch or create_commit) answer ``status``, as
    the Hub answers a write without the rights to it."""
    url = f"{remote.endpoint}/api/kernels/{REPO}/{method}"
    if method == "create_commit":
        remote.fail_next(method, hub_error("POST", url, status))
        return

    def refused(*args, **kwargs):
        raise hub_error("POST", url, status, message="You must be authenticated")

    monkeypatch.setattr(remote, method, refused)


@pytest.mark.parametrize(("method", "what"), [
    ("create_repo", "creating the repository"), ("create_branch", "creating branch v1"),
    ("create_commit", "publishing branch v1")])
@pytest.mark.parametrize("status", [401, 403])
def test_a_publish_without_any_token_says_no_token_was_found(
        remote: FakeHfApi, tmp_path: Path, env, method: str, what: str, status: int,
        monkeypatch, capsys) -> None:
    """With no HF_TOKEN and no login, the Hub refuses the publish's first write: the
    error says that no token was found and how to give one, not that the token is
    read-only; that is found from what huggingface_hub would send, with no request of
    its own (the fake answers nothing else)."""
    from kernelforge import cli

    without_token(monkeypatch, tmp_path)
    _refuse(remote, method, status, monkeypatch)
    hub = HfHub(api=CountingApi(remote), cache=env["cache"])
    monkeypatch.setattr("kernelforge.hub.as_hub", lambda h: hub)
    assert cli.main(["publish", str(_cli_project(tmp_path)), "--repo", REPO,
                     "--hub", "hf"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {what} for {REPO} on the Hugging Face Hub failed: "), err
    assert err.rstrip().endswith(
        "; no Hugging Face token was found (HF_TOKEN is not set and 'hf auth login' was not "
        "run), and publishing needs a token with write access to the repository: log in "
        "with 'hf auth login' with a write token, set HF_TOKEN to one, or pass one as "
        "token="), err
    assert "read-only" not in err and "Traceback" not in err
    assert {c.split()[0] for c in hub._api.calls} <= {
        "create_repo", "create_branch", "create_commit", "list_repo_refs", "list_repo_tree",
        "hf_hub_download", "delete_branch", "repo_info"}


@pytest.mark.parametrize(("token", "said", "not_said"), [
    ("login", "a read-only token loads but cannot publish", "no Hugging Face token"),
    ("disabled", "no token was sent: HF_HUB_DISABLE_IMPLICIT_TOKEN is set, so neither "
                 "HF_TOKEN nor the login of 'hf auth login' is used, and publishing needs a "
                 "token with write access to the repository: pass one as token=, or unset "
                 "HF_HUB_DISABLE_IMPLICIT_TOKEN", "read-only"),
    ("given", "a read-only token loads but cannot publish", "no token"),
    ("false", "no token was sent: this HfHub's client was made with token=False, and "
              "publishing needs a token with write access to the repository: make the "
              "client with one (HfApi(token=...)), not token=False", "hf auth login"),
], ids=["login-file", "implicit-token-off", "token-given", "token-false"])
def test_where_the_token_came_from_decides_the_fix_for_a_refused_publish(
        remote: FakeHfApi, tmp_path: Path, env, token: str, said: str, not_said: str,
        monkeypatch) -> None:
    """A token from the login's file or given to the client is one that was sent (and
    lacks write access); HF_HUB_DISABLE_IMPLICIT_TOKEN, or a client made with
    token=False, sends none even with a login, and logging in is then no fix."""
    from huggingface_hub import constants

    login = without_token(monkeypatch, tmp_path)
    login.write_text("hf_login_token\n")
    if token == "disabled":
        monkeypatch.setattr(constants, "HF_HUB_DISABLE_IMPLICIT_TOKEN", True)
    if token == "given":
        login.unlink()
        monkeypatch.setattr(remote, "token", "hf_given_token", raising=False)
    if token == "false":  # sends none, the login there notwithstanding
        monkeypatch.setattr(remote, "token", False, raising=False)
    remote.fail_next("create_commit", hub_error(
        "POST", f"{remote.endpoint}/api/kernels/{REPO}/preupload/v1", 403))
    with pytest.raises(HubError) as info:
        publish(HfHub(api=remote, cache=env["cache"]), tmp_path / "p",
                torch_cpu={"module_id": uid("tok")})
    assert said in str(info.value) and not_said not in str(info.value), str(info.value)


def test_a_branch_that_a_token_may_not_create_but_exists_is_published_to(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, monkeypatch) -> None:
    """The Hub answers 403 to a branch creation the token may not make: a branch that
    exists is published to all the same (as create_branch(exist_ok=True) takes it), and
    one that does not is the error."""
    publish(hf, tmp_path / "p1", torch_cpu={"module_id": uid("fb")})

    def forbidden(repo_id, *, branch, **kwargs):
        raise hub_error("POST", f"{remote.endpoint}/api/kernels/{repo_id}/branch/{branch}",
                        403, message="You don't have the rights to create a branch")

    monkeypatch.setattr(remote, "create_branch", forbidden)
    c2 = publish(hf, tmp_path / "p2", torch_cpu={"module_id": uid("fb2")})
    assert hf.branches(REPO)["v1"] == c2
    with pytest.raises(HubError, match="(?s)creating branch v2 .*log in with 'hf auth login'"):
        publish(hf, tmp_path / "p3", version=2, torch_cpu={"module_id": uid("fb3")})


def test_a_new_branch_is_deleted_when_its_start_could_not_be_read(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, monkeypatch) -> None:
    """The refs read after the branch is made fail: the branch still points at main's
    head, where the Hub made it, so it holds no build and is deleted."""
    c1 = publish(hf, tmp_path / "p1", torch_cpu={"module_id": uid("sr")})
    refs = remote.list_repo_refs
    made: list[str] = []
    create_branch = remote.create_branch

    def create(*args, **kwargs):
        made.append(kwargs["branch"])
        return create_branch(*args, **kwargs)

    def list_refs(*args, **kwargs):
        if made == ["v2"]:  # the first read after the branch is made
            made.append("read")
            raise _client_connect_error()
        return refs(*args, **kwargs)

    monkeypatch.setattr(remote, "create_branch", create)
    monkeypatch.setattr(remote, "list_repo_refs", list_refs)
    with pytest.raises(HubError, match="listing refs"):
        publish(hf, tmp_path / "p2", version=2, torch_cpu={"module_id": uid("sr2")})
    assert made == ["v2", "read"]
    assert set(hf.branches(REPO)) == {"main", "v1"}
    assert revisions.select(hf, REPO, announce=False).commit == c1


def test_a_new_branch_that_cannot_be_deleted_is_named_in_a_warning(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, monkeypatch, caplog) -> None:
    def fail(*args, **kwargs):
        raise _client_connect_error()

    monkeypatch.setattr(remote, "create_commit", fail)
    monkeypatch.setattr(remote, "delete_branch", fail)
    with caplog.at_level(logging.WARNING, logger="kernelforge"), \
            pytest.raises(HubError, match="publishing"):
        publish(hf, tmp_path / "p", torch_cpu={"module_id": uid("nd")})
    assert (f"{REPO}: branch v1, created by this failed publish, may hold no build and "
            "could not be deleted") in caplog.text
    assert "publish again, or delete the branch on the Hub" in caplog.text


def test_offline_variants_of_a_commit_in_other_case_without_a_listing(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, key, monkeypatch) -> None:
    import shutil

    commit = publish(hf, tmp_path / "p", key=key, torch_cpu={"module_id": uid("vc")})
    loader.get_kernel(REPO, version=1, hub=hf)
    shutil.rmtree(hf.cache.root / "listings")  # only the variant entry is left
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = HfHub(api=remote, cache=hf.cache.root)
    assert offline.variants(REPO.upper(), commit) == ["torch-cpu"]


def test_transport_errors_are_known_by_module_and_bugs_pass_through(
    hf: HfHub, remote: FakeHfApi, monkeypatch
) -> None:
    raised: list[Exception] = []

    def fail(*args, **kwargs):
        raise raised[-1]

    monkeypatch.setattr(remote, "list_repo_refs", fail)
    raised.append(_FutureClientError("connection refused"))
    with pytest.raises(HubError, match="failed: connection refused; check the network"):
        hf.branches(REPO)
    raised.append(KeyError("a bug, not the network"))
    with pytest.raises(KeyError, match="a bug"):
        hf.branches(REPO)


# --- offline: has_kernel agrees with get_kernel, and the advice works --------------------


def test_offline_has_kernel_needs_the_variant_in_the_cache(hf: HfHub, remote: FakeHfApi,
                                                           tmp_path: Path, key) -> None:
    module_id = uid("offhas")
    commit = publish(hf, tmp_path / "p", key=key, torch_cpu={"module_id": module_id})
    loader.kernel_info(REPO, version=1, hub=hf)  # refs, listing and metadata: no variant
    remote.go_down()
    offline = hf.cache_only()
    assert loader.has_kernel(REPO, version=1, hub=offline) is False
    with pytest.raises(HubError, match="not in the download cache.*load it once with "
                                       "get_kernel while online"):
        loader.get_kernel(REPO, version=1, hub=offline)
    remote.come_up()
    hf.fetch_variant(REPO, commit, "torch-cpu")
    remote.go_down()
    assert loader.has_kernel(REPO, version=1, hub=offline) is True
    assert loader.get_kernel(REPO, version=1, hub=offline).__name__ == module_id


def test_the_offline_advice_works(hf: HfHub, remote: FakeHfApi, tmp_path: Path, key) -> None:
    """Both ways the offline error suggests lead to a working offline load."""
    module_id = uid("advice")
    publish(hf, tmp_path / "p", key=key, torch_cpu={"module_id": module_id})
    lock = _locked_and_downloaded(remote, tmp_path, tmp_path / "b")
    remote.go_down()
    offline = HfHub(api=remote, cache=tmp_path / "b", offline=True)
    with pytest.raises(HubError) as info:  # 'kernelforge download' saves no refs...
        loader.get_kernel(REPO, version=1, hub=offline)
    assert "load_kernel(repo_id, lockfile=...)" in str(info.value)
    # ... and what the error says instead works
    assert loader.load_kernel(REPO, lockfile=lock, hub=offline).__name__ == module_id
    # the other way: one get_kernel while online keeps what an offline one needs
    remote.come_up()
    assert loader.get_kernel(REPO, version=1, hub=HfHub(api=remote, cache=tmp_path / "c"))
    remote.go_down()
    fresh = HfHub(api=remote, cache=tmp_path / "c", offline=True)
    assert loader.get_kernel(REPO, version=1, hub=fresh).__name__ == module_id


def test_the_offline_error_names_the_reason_the_hub_is_offline(
    hf: HfHub, remote: FakeHfApi, tmp_path: Path, monkeypatch
) -> None:
    """HF_HUB_OFFLINE is named only when it is set; offline=True (or cache_only()) is
    named as such."""
    commit = publish(hf, tmp_path / "p", torch_cpu={"module_id": uid("why")})
    made_offline = HfHub(api=remote, cache=tmp_path / "cold", offline=True)
    for hub in (made_offline, made_offline.cache_only()):
        with pytest.raises(HubError) as info:
            loader.get_kernel(REPO, version=1, hub=hub)
        assert (f"repository {REPO!r} is not in the download cache {tmp_path / 'cold'} and "
                "this HfHub was made offline (offline=True, or cache_only()); load it once "
                "with get_kernel while online") in str(info.value)
        assert "HF_HUB_OFFLINE" not in str(info.value)
        with pytest.raises(HubError, match="file list is not in the download cache .* and "
                                           r"this HfHub was made offline \(offline=True"):
            hub.variants(REPO, commit)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    by_env = HfHub(api=remote, cache=tmp_path / "cold")
    with pytest.raises(HubError, match=r"torch-cpu/metadata.json at \w+ is not in the download "
                                       "cache .* and HF_HUB_OFFLINE is set; load the kernel "
                                       "once with get_kernel while online"):
        by_env.read_file(REPO, commit, "build/torch-cpu/metadata.json")
    with pytest.raises(HubError, match=r"variant torch-cpu at \w+ is not in the download cache "
                                       ".* and HF_HUB_OFFLINE is set"):
        by_env.fetch_variant(REPO, commit, "torch-cpu")


def _damage(files: Path, how: str) -> None:
    """Damage a cache entry's variant directory as an interrupted removal by hand does."""
    import shutil

    for p in [files, *files.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    if how == "files":
        shutil.rmtree(files)
    elif how == "metadata":
        (files / "metadata.json").unlink()
    else:
        (files / "metadata.json").write_text("{not json")


@pytest.mark.parametrize("how", ["files", "metadata", "unparsable"])
def test_a_damaged_cache_entry_is_fetched_again_online_and_named_offline(
    hf: HfHub, remote: FakeHfApi, tmp_path: Path, monkeypatch, caplog, how: str
) -> None:
    """An entry without its files/ or metadata.json (or with one that does not parse) is
    damaged, not a broken kernel: online it is fetched again, offline the error says so
    and gives the commands that replace it."""
    module_id = uid("dmg")
    commit = publish(hf, tmp_path / "p", torch_cpu={"module_id": module_id})
    loader.kernel_info(REPO, version=1, hub=hf)  # metadata and listing cached
    files = hf.fetch_variant(REPO, commit, "torch-cpu").path
    _damage(files, how)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError) as info:
        loader.get_kernel(REPO, version=1, hub=hf, trust_remote_code=True)
    said = str(info.value)
    assert "download cache entry" in said and "is damaged" in said, said
    assert "every build variant needs" not in said, said
    assert f"'kernelforge cache remove {REPO} --revision {commit[:12]}" in said, said
    assert "'kernelforge download'" in said and "HF_HUB_OFFLINE" in said, said
    assert loader.has_kernel(REPO, version=1, hub=hf) is False
    monkeypatch.delenv("HF_HUB_OFFLINE")
    before = len(remote.fetches())
    with caplog.at_level(logging.WARNING, logger="kernelforge"):
        module = loader.get_kernel(REPO, version=1, hub=hf, trust_remote_code=True)
    assert module.__name__ == module_id
    assert "is damaged" in caplog.text and "fetching it again" in caplog.text, caplog.text
    assert len(remote.fetches()) > before
    entry = hf.cache.entry(REPO, commit, "torch-cpu")
    assert entry is not None and entry.damaged is None
    assert [e for e in hf.cache.entries() if e[1] == commit] == [(REPO, commit, "torch-cpu")]


def test_a_busy_hub_during_a_download_is_not_answered_with_offline_mode() -> None:
    """A download fills the download cache: a busy Hub's advice leaves HF_HUB_OFFLINE out
    within used_for("download"), and only there."""
    from kernelforge.hub.hf import _http_advice, used_for

    err = mock.Mock()
    err.response.status_code = 503
    assert "HF_HUB_OFFLINE" in _http_advice(err)
    with used_for("download"):
        assert _http_advice(err) == "the Hub is busy or down: try again later"
    assert "HF_HUB_OFFLINE" in _http_advice(err)


def test_without_huggingface_hub_every_hf_command_says_what_to_install(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """huggingface_hub is optional: publishing to the Hub without it is the same one-line
    error as reading from it, with the install command, never an ImportError."""
    from kernelforge.cli import main

    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import raises ImportError
    hub = HfHub(cache=tmp_path / "cache")
    with pytest.raises(HubError, match=r"needs the huggingface_hub package; install it with: "
                                       r"pip install 'huggingface_hub>=1\.10'$"):
        hub.publish(REPO, tmp_path / "p", version=1)
    with pytest.raises(HubError, match=r"pip install 'huggingface_hub>=1\.10'$"):
        hub.versions(REPO)
    project = tmp_path / "proj"
    assert main(["init", "proj", str(project)]) == 0
    (project / "build").mkdir()
    capsys.readouterr()
    assert main(["publish", str(project), "--repo", REPO, "--hub", "hf"]) == 1
    err = capsys.readouterr().err
    assert "error: the Hugging Face Hub needs the huggingface_hub package" in err, err
    assert "Traceback" not in err


def test_the_install_named_for_huggingface_hub_is_the_hf_extra() -> None:
    """The error without huggingface_hub names the requirement itself, and it is what
    the ``hf`` extra (``pip install -e '.[hf]'``, README.md) installs: the two cannot
    drift apart."""
    from kf_testutil import REPO as CHECKOUT

    from kernelforge._parse import toml_loads
    from kernelforge.hub.hf import HF_REQUIREMENT

    extras = toml_loads((CHECKOUT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert extras["hf"] == [HF_REQUIREMENT]
    assert HF_REQUIREMENT in extras["test"]


def test_the_loaders_key_for_a_hub_tells_clients_and_tokens_apart(tmp_path: Path) -> None:
    import gc
    import weakref

    class Unhashable(FakeHfApi):
        __hash__ = None  # type: ignore[assignment]

        def __eq__(self, other: object) -> bool:
            return True  # every instance "equal": the key must not rely on it

    a, b = Unhashable(tmp_path / "a"), Unhashable(tmp_path / "b")
    cache = tmp_path / "cache"
    key_a = HfHub(api=a, cache=cache).cache_key()
    assert key_a == HfHub(api=a, cache=cache).cache_key()
    assert key_a != HfHub(api=b, cache=cache).cache_key()
    assert hash(key_a) == hash(HfHub(api=a, cache=cache).cache_key())
    # the key holds the client, so no later client can take its id
    alive = weakref.ref(a)
    del a
    gc.collect()
    assert alive() is not None
    # default clients with the same settings share a key; another token does not
    assert HfHub(cache=cache).cache_key() == HfHub(cache=cache).cache_key()
    assert HfHub(cache=cache, token="t1").cache_key() != HfHub(cache=cache,
                                                               token="t2").cache_key()
    assert "t1" not in repr(HfHub(cache=cache, token="t1").cache_key())


@pytest.mark.parametrize(("code", "fix"), [
    (errno.ENOSPC, "free space on its disk, or set KERNELFORGE_CACHE to a directory on "
                   "another one"),
    (errno.EACCES, "set KERNELFORGE_CACHE to a directory you can write, or, to load only "
                   "what the cache holds without writing to it, set HF_HUB_OFFLINE=1"),
], ids=["full", "denied"])
@pytest.mark.parametrize("where", ["download", "entry"])
def test_a_download_that_cannot_be_written_says_so_not_check_the_network(
    hf: HfHub, remote: FakeHfApi, tmp_path: Path, monkeypatch, code: int, fix: str,
    where: str
) -> None:
    """A full disk or a cache that may not be written, met by huggingface_hub writing a
    downloaded file or by the cache writing its entry, is a HubError naming the cache and
    the fix: not a network failure's advice, not a bare OSError; nothing is cached."""
    publish(hf, tmp_path / "p", torch_cpu={})
    strerror = os.strerror(code)
    if where == "download":
        download = remote.hf_hub_download

        def failing(repo_id: str, filename: str, **kwargs):
            if filename.endswith("helper.py"):  # after some files of the variant
                raise OSError(code, strerror, kwargs["local_dir"])
            return download(repo_id, filename, **kwargs)

        monkeypatch.setattr(remote, "hf_hub_download", failing)
    else:
        def failing_write(path: Path, data: bytes) -> str:
            raise OSError(code, strerror)  # a write error names no file

        monkeypatch.setattr("kernelforge.cache._durable.write_file", failing_write)
    with pytest.raises(HubError) as info:
        loader.get_kernel(REPO, version=1, hub=HfHub(api=remote, cache=hf.cache.root),
                          trust_remote_code=True)
    said = str(info.value)
    assert f"writing to the download cache {hf.cache.root} failed ({strerror}" in said, said
    assert said.endswith(f"; nothing was cached; fix: {fix}"), said
    assert "check the network" not in said, said
    assert isinstance(info.value.__cause__, OSError)
    assert hf.cache.entries() == [] and not list((hf.cache.root / "tmp").iterdir())


def test_a_cache_lock_held_too_long_is_not_taken_for_a_full_disk(
    hf: HfHub, remote: FakeHfApi, tmp_path: Path, monkeypatch
) -> None:
    """A timeout waiting for a download's lock (filelock.Timeout, an OSError) is not a
    write that failed: it is raised as it is, not as 'writing to the download cache'."""
    import filelock

    publish(hf, tmp_path / "p", torch_cpu={})

    def timed_out(self, *args, **kwargs):
        raise filelock.Timeout(str(tmp_path / "x.lock"))

    monkeypatch.setattr(filelock.FileLock, "acquire", timed_out)
    with pytest.raises(filelock.Timeout):
        loader.get_kernel(REPO, version=1, hub=HfHub(api=remote, cache=hf.cache.root),
                          trust_remote_code=True)


def test_online_a_read_only_cache_loads_what_it_holds(
    hf: HfHub, remote: FakeHfApi, tmp_path: Path, monkeypatch, caplog
) -> None:
    """A cache filled beforehand and then only read (a read-only file system): an online
    load of what it holds loads it, one WARNING saying that the refs seen were not kept
    (though the load lists them more than once), rather than failing on that write."""
    module_id = uid("ro")
    publish(hf, tmp_path / "p", torch_cpu={"module_id": module_id})
    loader.kernel_info(REPO, version=1, hub=hf)
    hf.fetch_variant(REPO, hf.resolve(REPO, "v1"), "torch-cpu")
    root = str(hf.cache.root)
    writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT
    real_open, real_mkdir = os.open, os.mkdir

    def read_only(path: str) -> None:
        if os.path.abspath(path).startswith(root + os.sep):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    def open_(path, flags, *args, **kwargs):
        if flags & writes:
            read_only(path)
        return real_open(path, flags, *args, **kwargs)

    def mkdir(path, *args, **kwargs):
        read_only(path)
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "mkdir", mkdir)
    again = HfHub(api=FakeHfApi(remote.root), cache=hf.cache.root)  # another process
    caplog.clear()  # the publish's own
    with caplog.at_level(logging.WARNING, logger="kernelforge"):
        module = loader.get_kernel(REPO, version=1, hub=again, trust_remote_code=True)
    assert module.__name__ == module_id
    [said] = [r.getMessage() for r in caplog.records]
    assert "refs not kept in the download cache" in said, said
    assert "Read-only file system" in said, said
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kernelforge"):
        assert loader.has_kernel(REPO, revision="v1", hub=again)  # the same hub: said
    assert caplog.records == []


@pytest.mark.parametrize("call", ["list_repo_refs", "hf_hub_download"])
def test_a_file_outside_the_cache_that_cannot_be_read_is_not_a_cache_write(
    hf: HfHub, remote: FakeHfApi, tmp_path: Path, monkeypatch, call: str
) -> None:
    """A file huggingface_hub reads outside the download cache (a token file the user may
    not read) is refused with EACCES: that is no failed write to the download cache, so
    the error neither says so nor advises another KERNELFORGE_CACHE."""
    publish(hf, tmp_path / "p", torch_cpu={})
    token = tmp_path / "hf-home" / "token"

    def unreadable_token(*args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(token))

    monkeypatch.setattr(remote, call, unreadable_token)
    with pytest.raises(HubError) as info:
        loader.get_kernel(REPO, version=1, hub=HfHub(api=remote, cache=hf.cache.root),
                          trust_remote_code=True)
    said = str(info.value)
    assert str(token) in said, said
    assert "writing to the download cache" not in said, said
    assert "KERNELFORGE_CACHE" not in said, said


# --- network round trips --------------------------------------------------------------

DEP = "kernels-test/dep"


def _round_trips(repo: str, downloads: int = 1, **more: int) -> dict[str, int]:
    """What one look at ``repo`` asks the Hub with an empty download cache: its refs once,
    the file lists of main (for kernel-status.toml) and of the chosen commit, and
    ``downloads`` files (the chosen variant's metadata.json; all four of its files for a
    load)."""
    return {f"list_repo_refs {repo}": 1, f"list_repo_tree {repo}": 2,
            f"hf_hub_download {repo}": downloads, **{f"{m} {repo}": n for m, n in more.items()}}


def test_one_operation_lists_each_repositorys_refs_once(hf: HfHub, remote: FakeHfApi,
                                                        tmp_path: Path, monkeypatch) -> None:
    from kernelforge import cli
    from kernelforge.lock import lock_project

    make_variant(tmp_path / "dep", module_id=uid("dep"))
    hf.publish(DEP, tmp_path / "dep", version=1)
    vdir = make_variant(tmp_path / "main", module_id=uid("main"))
    meta = json.loads((vdir / "metadata.json").read_text())
    meta["kernel-depends"] = [{"repo-id": DEP, "version": 1}]
    (vdir / "metadata.json").write_text(json.dumps(meta))
    commit = hf.publish(REPO, tmp_path / "main", version=1).commit
    caches = iter(range(100))

    def calls(op, cache: Path | None = None, offline: bool = False) -> dict[str, int]:
        api = CountingApi(remote)
        op(HfHub(api=api, cache=cache or tmp_path / f"cold{next(caches)}", offline=offline))
        return dict(api.calls)

    for selector, extra in (({"version": 1}, {}), ({"revision": "v1"}, {}), ({}, {}),
                            ({"revision": commit[:8]}, {"repo_info": 1})):
        info = functools.partial(loader.kernel_info, REPO, backend="cpu", **selector)
        assert calls(lambda h, info=info: info(hub=h)) == _round_trips(REPO, **extra), selector
    assert calls(lambda h: loader.has_kernel(REPO, version=1, hub=h, backend="cpu")) == {
        **_round_trips(REPO), **_round_trips(DEP)}
    warm = tmp_path / "warm"
    assert calls(lambda h: loader.get_kernel(REPO, version=1, hub=h, backend="cpu",
                                             trust_remote_code=True), warm) == {
        **_round_trips(REPO, 4), **_round_trips(DEP, 4)}
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        f'[tool.kernelforge.dependencies]\n"{REPO}" = ">=1"\n')
    assert calls(lambda h: lock_project(project, hub=h, allow=True)) == {
        **_round_trips(REPO), **_round_trips(DEP)}
    counted = CountingApi(remote)
    monkeypatch.setattr("kernelforge.hub.as_hub", lambda hub: HfHub(api=counted, cache=warm))
    assert cli.main(["versions", REPO, "--hub", "hf"]) == 0
    assert counted.calls == {f"list_repo_refs {REPO}": 1}  # main's and v1's lists are cached
    # what the cache holds: the refs once online, nothing at all offline
    assert calls(lambda h: loader.kernel_info(REPO, hub=h, backend="cpu"), warm) == {
        f"list_repo_refs {REPO}": 1}
    assert calls(lambda h: loader.kernel_info(REPO, hub=h, backend="cpu"), warm, True) == {}
    # an answer is reused within one call only: the next call sees a branch that moved
    api = CountingApi(remote)
    hub = HfHub(api=api, cache=warm)
    assert loader.kernel_info(REPO, version=1, hub=hub, backend="cpu").commit == commit
    make_variant(tmp_path / "again", module_id=uid("again"))
    moved = hf.publish(REPO, tmp_path / "again", version=1).commit
    assert loader.kernel_info(REPO, version=1, hub=hub, backend="cpu").commit == moved
    assert api.calls[f"list_repo_refs {REPO}"] == 2


def test_download_all_variants_fetches_each_file_once(hf: HfHub, remote: FakeHfApi,
                                                      tmp_path: Path) -> None:
    # every variant's metadata.json is read (and kept for offline loads) before the
    # variant is fetched, which takes that copy: no file is downloaded twice
    from kernelforge.lock import download_locked, lock_project

    for variant in ("torch-cpu", "torch-cuda"):
        make_variant(tmp_path / "dep", variant, module_id=uid("dep"))
    commits = {DEP: hf.publish(DEP, tmp_path / "dep", version=1).commit}
    for variant in ("torch-cpu", "torch-cuda"):
        vdir = make_variant(tmp_path / "p", variant, module_id=uid("main"))
        meta = json.loads((vdir / "metadata.json").read_text())
        meta["kernel-depends"] = [{"repo-id": DEP, "version": 1}]
        (vdir / "metadata.json").write_text(json.dumps(meta))
    commits[REPO] = hf.publish(REPO, tmp_path / "p", version=1).commit
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    lock_project(project, hub=hf, allow=True)
    (remote.root / "fetch.log").unlink()
    cold = HfHub(api=remote, cache=tmp_path / "cold")
    got = download_locked(project, hub=cold, all_variants=True)
    assert sorted((r, v) for r, v, _ in got) == [
        (DEP, "torch-cpu"), (DEP, "torch-cuda"), (REPO, "torch-cpu"), (REPO, "torch-cuda")]
    fetched = remote.fetches()
    assert len(fetched) == len(set(fetched)) == 16, fetched  # 4 files in each variant
    # an offline load finds the metadata.json copies, byte for byte those fetched
    offline = HfHub(api=remote, cache=tmp_path / "cold", offline=True)
    for repo, variant, path in got:
        assert offline.read_file(repo, commits[repo], f"build/{variant}/metadata.json") == (
            path / "metadata.json").read_bytes()
    assert loader.kernel_info(REPO, lockfile=project, hub=offline,
                              backend="cpu").variant == "torch-cpu"


# --- transient failures: what is tried again, how often, how long ------------------------


def _refs_error(remote: FakeHfApi, status: int, **kw) -> Exception:
    return hub_error("GET", f"{remote.endpoint}/api/kernels/{REPO}/refs", status, **kw)


def _client_error(name: str, text: str) -> Exception:
    """An error of the HTTP client huggingface_hub uses, by its class name."""
    import importlib

    from huggingface_hub import errors as hf_errors

    client = importlib.import_module(hf_errors.HTTPError.__module__.split(".")[0])
    return getattr(client, name)(text)


@pytest.mark.parametrize(("make", "expected"), [
    (lambda r: _refs_error(r, 503), [1.0, 2.0]),
    (lambda r: _refs_error(r, 502), [1.0, 2.0]),
    (lambda r: _refs_error(r, 429, headers={"Retry-After": "5"}), [5.0, 5.0]),
    # the longest wait it takes: a minute
    (lambda r: _refs_error(r, 429, headers={"Retry-After": "60"}), [60.0, 60.0]),
    (lambda r: _client_error("ReadTimeout", "The read operation timed out"), [1.0, 2.0]),
    (lambda r: _client_error("ReadError", "[Errno 104] Connection reset by peer"), [1.0, 2.0]),
    (lambda r: ConnectionResetError(104, "Connection reset by peer"), [1.0, 2.0]),
], ids=["503", "502", "429-retry-after", "429-a-minute", "timeout", "reset",
        "builtin-reset"])
def test_a_transient_failure_listing_refs_is_tried_again(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, waits: list[float], make, expected,
        caplog) -> None:
    """huggingface_hub lists refs once (it retries file listings and downloads, not
    this): a busy Hub, a rate limit (for as long as it asks), a timeout or a connection
    cut off on the first request of every load is tried again, with a WARNING."""
    module_id = uid("retry")
    publish(hf, tmp_path / "p", torch_cpu={"module_id": module_id})
    remote.fail_next("list_repo_refs", make(remote), make(remote))
    with caplog.at_level(logging.WARNING, logger="kernelforge.hub.hf"):
        cold = HfHub(api=remote, cache=tmp_path / "cold")
        kernel = loader.get_kernel(REPO, version=1, hub=cold, trust_remote_code=True)
    assert kernel.__name__ == module_id
    assert waits == expected
    said = [r.getMessage() for r in caplog.records if "trying again" in r.getMessage()]
    assert len(said) == 2 and said[0].startswith(f"kernelforge: listing refs for {REPO} on "
                                                 "the Hugging Face Hub failed ("), said
    assert said[0].endswith(f"trying again in {expected[0]:.0f} s (try 2 of 6)"), said


def test_a_refs_listing_that_keeps_failing_says_how_often_it_was_tried(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, waits: list[float], capsys,
        monkeypatch) -> None:
    """Six tries over 23 s, the waits doubling as huggingface_hub's do; then one error,
    no traceback, and the next call starts afresh."""
    from kernelforge import cli

    publish(hf, tmp_path / "p", torch_cpu={"module_id": uid("busy")})
    remote.fail_next("list_repo_refs", *[_refs_error(remote, 503) for _ in range(6)])
    monkeypatch.setattr("kernelforge.hub.as_hub", lambda hub: hf)
    assert cli.main(["versions", REPO, "--hub", "hf"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: listing refs for {REPO} on the Hugging Face Hub failed: "
                          ), err
    assert "(tried 6 times over 23 s); the Hub is busy" in err, err
    assert "the Hub is busy or down: try again later" in err and "Traceback" not in err
    assert waits == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert cli.main(["versions", REPO, "--hub", "hf"]) == 0


@pytest.mark.parametrize(("make", "said"), [
    (lambda r: _client_error("ConnectError", "[Errno -3] Temporary failure in name "
                                              "resolution"), "check the network, or set "
                                                             "HF_HUB_OFFLINE=1"),
    (lambda r: _refs_error(r, 404, code="RepoNotFound"), f"repository {REPO!r} not found"),
    (lambda r: _refs_error(r, 401, code="RepoNotFound"), "log in with 'hf auth login'"),
    (lambda r: _refs_error(r, 403, code="GatedRepo"), "is gated: ask for access"),
    (lambda r: _refs_error(r, 403), "log in with 'hf auth login'"),
    (lambda r: _refs_error(r, 429, headers={"Retry-After": "3600"}),
     "try again later (it asks to wait 3600 s)"),
], ids=["no-network", "404", "401", "gated", "403", "429-an-hour"])
def test_what_trying_again_cannot_help_fails_at_once(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, waits: list[float], make,
        said: str) -> None:
    """No network (which HF_HUB_OFFLINE=1 answers), a missing, private or gated
    repository, and a rate limit longer than a minute are not tried again."""
    publish(hf, tmp_path / "p", torch_cpu={"module_id": uid("once")})
    remote.fail_next("list_repo_refs", make(remote))
    with pytest.raises(HubError) as info:
        loader.get_kernel(REPO, version=1, hub=HfHub(api=remote, cache=tmp_path / "cold"))
    assert said in str(info.value) and "tried" not in str(info.value), str(info.value)
    assert waits == []


def test_a_revision_looked_up_on_the_hub_is_tried_again(hf: HfHub, remote: FakeHfApi,
                                                       tmp_path: Path,
                                                       waits: list[float]) -> None:
    """A commit prefix is looked up with repo_info, which huggingface_hub asks once too."""
    commit = publish(hf, tmp_path / "p", torch_cpu={"module_id": uid("prefix")})
    remote.fail_next("repo_info", hub_error(
        "GET", f"{remote.endpoint}/api/kernels/{REPO}/revision/{commit[:8]}", 500))
    assert hf.resolve(REPO, commit[:8]) == commit
    assert waits == [1.0]


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), ConnectionResetError(104, "reset")],
                         ids=["ctrl-c", "reset"])
@pytest.mark.parametrize("looked_first", [False, True], ids=["metadata", "variant-file"])
def test_a_download_cut_off_halfway_leaves_nothing_and_the_next_load_fetches_it(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, stop: BaseException,
        looked_first: bool) -> None:
    """Cut off after part of a file was written, as the single file (metadata.json) or as
    a file of the variant: nothing half-written stays in the download cache, and the
    next load fetches what it lacks with no cleaning up by hand."""
    module_id = uid("cut")
    commit = publish(hf, tmp_path / "p", torch_cpu={"module_id": module_id})
    cold = HfHub(api=remote, cache=tmp_path / "cold")
    if looked_first:  # metadata.json is cached: the next download is one of the variant
        loader.kernel_info(REPO, version=1, hub=cold)
    remote.fail_next("hf_hub_download", stop, written=100)
    with pytest.raises((KeyboardInterrupt, HubError)) as info:
        loader.get_kernel(REPO, version=1, hub=cold, trust_remote_code=True)
    assert type(info.value) is (KeyboardInterrupt if isinstance(stop, KeyboardInterrupt)
                                else HubError)
    meta = "build/torch-cpu/metadata.json"
    assert (cold.cache.cached_file(REPO, commit, meta) is not None) is looked_first
    assert cold.cache.entries() == []
    assert not any((cold.cache.root / "tmp").iterdir())
    assert not [p for p in cold.cache.root.rglob("*") if "incomplete" in p.name]
    assert loader.get_kernel(REPO, version=1, hub=cold,
                             trust_remote_code=True).__name__ == module_id
    assert cold.cache.entries() != [] and not any((cold.cache.root / "tmp").iterdir())


@pytest.mark.parametrize(("status", "headers", "said", "not_said"), [
    (401, {"X-Error-Message": "Invalid credentials in Authorization header"},
     "the Hub refused the token sent (invalid, expired or revoked): log in again with "
     "'hf auth login' or pass a valid token=", "with access to this repository"),
    (403, {"X-Error-Message": "Access to this resource is disabled."},
     f"repository {REPO!r} on the Hugging Face Hub is disabled: the Hub serves none of its "
     "files to anyone, so no token or login helps", "log in"),
    (403, {}, "log in with 'hf auth login' or pass token=, with access to this repository",
     "refused the token"),
], ids=["bad-token", "disabled", "forbidden"])
@pytest.mark.parametrize("method", ["list_repo_refs", "hf_hub_download"])
def test_a_refused_token_and_a_disabled_repository_get_their_own_fix(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, waits: list[float], capsys,
        monkeypatch, status: int, headers: dict[str, str], said: str, not_said: str,
        method: str) -> None:
    """A token the Hub does not accept is to be replaced (a stale HF_TOKEN wins over a
    fresh login), and a disabled repository is served to no one: each says so, once, with
    no traceback and no retry."""
    from kernelforge import cli

    publish(hf, tmp_path / "p", torch_cpu={"module_id": uid("auth")})
    cold = HfHub(api=remote, cache=tmp_path / "cold")
    remote.fail_next(method, _refs_error(remote, status, headers=headers))
    monkeypatch.setattr("kernelforge.hub.as_hub", lambda hub: cold)
    assert cli.main(["info", REPO, "--version", "1", "--hub", "hf"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and said in err and not_said not in err, err
    assert "Traceback" not in err and waits == []


def test_a_metadata_json_damaged_on_its_way_is_fetched_anew_by_the_next_load(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path) -> None:
    """A variant whose files do not match the metadata.json fetched for it is refused,
    "nothing was cached; try again": and trying again works also when the damaged file
    was metadata.json itself (kept as a single file to choose the variant), not only
    when it was one of the variant's own."""
    module_id = uid("transit")
    commit = publish(hf, tmp_path / "p", torch_cpu={"module_id": module_id})
    cold = HfHub(api=remote, cache=tmp_path / "cold")
    loader.kernel_info(REPO, version=1, hub=cold)  # metadata.json fetched and kept
    kept = cold.cache.cached_file(REPO, commit, "build/torch-cpu/metadata.json")
    assert kept is not None
    meta = json.loads(kept.read_text())  # still metadata.json, but one digest is off
    files = meta["digest"]["files"]
    files["helper.py"] = files["__init__.py"]
    kept.chmod(0o644)
    kept.write_text(json.dumps(meta))
    with pytest.raises(IntegrityError, match="(?s)changed: helper.py\n"
                                             "nothing was cached; try again"):
        loader.get_kernel(REPO, version=1, hub=cold, trust_remote_code=True)
    assert cold.cache.entries() == []
    assert loader.get_kernel(REPO, version=1, hub=cold,
                             trust_remote_code=True).__name__ == module_id


@pytest.mark.parametrize(("status", "advice"), [
    (503, "the Hub is busy or down: try again later"),
    (429, "the Hub is busy or down: try again later"),
    (403, "log in with 'hf auth login' or pass token=, with access to this repository"),
])
def test_a_download_the_hub_answers_says_the_answer_not_check_the_network(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, status: int, advice: str) -> None:
    """hf_hub_download raises a busy Hub's or a refusal's answer to its first request as
    files it cannot find, "check your connection": the error is the Hub's answer, with
    its own fix."""
    publish(hf, tmp_path / "p", torch_cpu={"module_id": uid("answer")})
    cold = HfHub(api=remote, cache=tmp_path / "cold")
    remote.fail_next("hf_hub_download", _refs_error(remote, status))
    with pytest.raises(HubError) as info:
        loader.get_kernel(REPO, version=1, hub=cold, trust_remote_code=True)
    said = str(info.value)
    assert said.startswith(f"downloading build/torch-cpu/metadata.json for {REPO} on the "
                           f"Hugging Face Hub failed: "), said
    assert advice in said and str(status) in said, said
    assert "check the network" not in said and "Internet connection" not in said, said


def test_a_file_listing_the_hub_fails_partway_is_said_as_a_listing_error(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path) -> None:
    """The file list is read page by page as it is iterated: a failure there is the
    listing's error with its advice, not the client's exception, and nothing is kept."""
    commit = publish(hf, tmp_path / "p", torch_cpu={"module_id": uid("pages")})
    cold = HfHub(api=remote, cache=tmp_path / "cold")
    remote.fail_next("list_repo_tree", hub_error(
        "GET", f"{remote.endpoint}/api/kernels/{REPO}/tree/{commit}", 503))
    with pytest.raises(HubError, match=rf"^listing files for {REPO} on the Hugging Face Hub "
                                       r"failed: (?s:.*)503(?s:.*)the Hub is busy or down"):
        cold.variants(REPO, commit)
    assert cold.cache.load_listing(REPO, commit) is None
    assert cold.variants(REPO, commit) == ["torch-cpu"]
