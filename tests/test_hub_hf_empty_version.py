"""A version branch that holds no build on the Hugging Face Hub (against a fake HfApi).

The Hub needs a version's branch before the commit that fills it, so for a few seconds
while a publish runs, and for good after one killed in between, branch ``v<N>`` points at
``main``'s head and holds its card only. A load that pins no version passes over it with
one WARNING; a load of that version says what the branch is; ``kernelforge versions``,
``kernelforge info`` and ``kernelforge lock`` say the same."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from huggingface_hub import CommitOperationAdd
from kf_sharing import CountingApi, FakeHfApi, isolate, make_variant, uid

from kernelforge import cli, loader
from kernelforge.errors import VariantNotFoundError
from kernelforge.hub.hf import HfHub

pytestmark = pytest.mark.usefixtures("cpu_system")

REPO = "kernels-test/relu"


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path: Path) -> dict[str, Path]:
    return isolate(monkeypatch, tmp_path)


def publish(hf: HfHub, root: Path, version: int, value: int) -> str:
    make_variant(root, version=version, value=value, module_id=uid(f"v{version}"))
    return hf.publish(REPO, root, version=version, card="# relu\n").commit


def branch_without_build(remote: FakeHfApi, version: int) -> str:
    """What a publish of ``version`` leaves between making its branch and its commit
    (or for good, killed there): the branch, at main's head; its commit."""
    remote.create_branch(REPO, branch=f"v{version}", repo_type="kernel")
    return remote.list_repo_refs(REPO, repo_type="kernel").branches[-1].target_commit


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]




def test_an_unpinned_load_passes_over_a_branch_without_a_build(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, caplog) -> None:
    c1 = publish(hf, tmp_path / "p1", 1, 1)
    empty = branch_without_build(remote, 2)
    assert remote.list_repo_files(REPO, revision="v2", repo_type="kernel") == [
        ".gitattributes", "README.md"]  # main's card only
    caplog.set_level(logging.INFO, logger="kernelforge")
    caplog.clear()  # the publish's own lines
    assert loader.get_kernel(REPO, hub=hf, trust_remote_code=True).VALUE == 1
    said = warnings_of(caplog)
    assert len(said) == 1, said  # the usual line, saying what was passed over too
    assert said[0].startswith(f"kernelforge: loading {REPO} version 1 (branch v1, revision "
                              f"{c1[:7]}) \u2014 pass version=1 to pin it; not version 2: "
                              f"its branch v2 (revision {empty[:7]}) holds no build"), said
    assert "a publish makes a version's branch a moment before the commit" in said[0]
    assert "one that failed or was killed left the branch behind" in said[0]
    assert (f"if branch v2 stays so, publish version 2 again (kernelforge publish PROJECT "
            f"--repo {REPO} --hub hf) or delete the branch (hf repos branch delete {REPO} v2 "
            "--repo-type kernel)") in said[0]
    caplog.clear()
    info = loader.kernel_info(REPO, hub=hf, trust_remote_code=True)
    assert (info.branch, info.commit) == ("v1", c1)
    assert any(note.startswith("version 1 is taken, not version 2: its branch v2")
               for note in info.notes), info.notes
    assert loader.has_kernel(REPO, hub=hf)
    assert warnings_of(caplog) == []  # neither loads anything: the notes say it
    # offline, from what the download cache kept: the same choice
    assert loader.kernel_info(REPO, hub=hf.cache_only(), trust_remote_code=True).commit == c1


def test_a_load_of_that_version_says_the_branch_holds_no_build(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path) -> None:
    publish(hf, tmp_path / "p1", 1, 1)
    empty = branch_without_build(remote, 2)
    for selector in ({"version": 2}, {"revision": "v2"}):
        with pytest.raises(VariantNotFoundError) as raised:
            loader.get_kernel(REPO, hub=hf, trust_remote_code=True, **selector)
        said = str(raised.value)
        assert said.startswith(f"{REPO} version 2 (branch v2, revision {empty[:7]}) holds no "
                               "build (no build/ file): a publish makes"), said
        assert "fits this system" not in said and "this system:" not in said, said
        assert raised.value.fix.startswith("if a publish is under way, try again once it "
                                           "is done; if branch v2 stays so, publish version "
                                           "2 again"), said
        assert raised.value.fix.endswith("meanwhile version 1 holds a build: load it with "
                                         "version=1 (--version 1 on the command line)"), said
        # still a FileNotFoundError, as Hugging Face's loader raises for a missing build
        assert isinstance(raised.value, FileNotFoundError)
    assert not loader.has_kernel(REPO, version=2, hub=hf)


def test_main_without_a_build_does_not_send_to_a_branch_at_its_head(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path) -> None:
    publish(hf, tmp_path / "p1", 1, 1)
    branch_without_build(remote, 2)  # at main's head: it holds no build either
    with pytest.raises(VariantNotFoundError) as raised:
        loader.get_kernel(REPO, revision="main", hub=hf, trust_remote_code=True)
    assert "builds are published on the version branches (v1); load one with version=1" in (
        raised.value.fix), raised.value.fix


def test_main_without_a_build_does_not_send_to_a_branch_made_from_an_older_main(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path) -> None:
    publish(hf, tmp_path / "p1", 1, 1)
    branch_without_build(remote, 2)  # at main's head then
    remote.create_commit(REPO, [CommitOperationAdd(path_in_repo="README.md",
                                                   path_or_fileobj=b"# relu, new card\n")],
                         commit_message="card", repo_type="kernel", revision="main")
    head = remote.list_repo_refs(REPO, repo_type="kernel").branches
    remote.create_tag(REPO, tag="card", revision=next(b.target_commit for b in head
                                                      if b.name == "main"),
                      repo_type="kernel")
    for revision in ("main", "card"):
        with pytest.raises(VariantNotFoundError) as raised:
            loader.get_kernel(REPO, revision=revision, hub=hf, trust_remote_code=True)
        assert raised.value.fix.startswith(
            "builds are published on the version branches (v1); load one with version=1"), (
            raised.value.fix)


def test_main_without_a_build_where_no_version_holds_one(
        hf: HfHub, remote: FakeHfApi) -> None:
    # a first publish killed between its branch and its commit; a card on main since
    remote.create_repo(REPO, repo_type="kernel")
    branch_without_build(remote, 1)
    remote.create_commit(REPO, [CommitOperationAdd(path_in_repo="README.md",
                                                   path_or_fileobj=b"# relu\n")],
                         commit_message="card", repo_type="kernel", revision="main")
    with pytest.raises(VariantNotFoundError) as raised:
        loader.get_kernel(REPO, revision="main", hub=hf, trust_remote_code=True)
    # the revision asked for is what the error is about; no version is offered instead
    assert str(raised.value).startswith(f"no build variant of {REPO} (branch main, "), (
        raised.value)
    assert raised.value.fix == ""


def test_no_branch_with_a_build_is_an_error_naming_them(
        hf: HfHub, remote: FakeHfApi) -> None:
    # a first publish killed between its branch and its commit: the only version is empty
    remote.create_repo(REPO, repo_type="kernel")
    empty = branch_without_build(remote, 1)
    with pytest.raises(VariantNotFoundError) as raised:
        loader.get_kernel(REPO, hub=hf, trust_remote_code=True)
    said = str(raised.value)
    assert said.startswith(f"{REPO} in the Hugging Face Hub has no version branch that holds "
                           f"a build: v1 (revision {empty[:7]}) holds no build (no build/ "
                           "file); a publish makes"), said
    assert "if branch v1 stays so, publish version 1 again" in said, said


def test_a_branch_with_other_files_under_build_is_not_passed_over(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, monkeypatch, capsys) -> None:
    # not what a publish leaves: it fails as before rather than being skipped unseen
    publish(hf, tmp_path / "p1", 1, 1)
    branch_without_build(remote, 2)
    remote.create_commit(REPO, [CommitOperationAdd(path_in_repo="build/notes.txt",
                                                   path_or_fileobj=b"x")],
                         commit_message="notes", repo_type="kernel", revision="v2")
    with pytest.raises(VariantNotFoundError, match="no build variant of .* fits this system"):
        loader.get_kernel(REPO, hub=hf, trust_remote_code=True)
    monkeypatch.setattr("kernelforge.hub.as_hub", lambda hub: hf)
    assert cli.main(["versions", REPO, "--hub", "hf"]) == 0
    assert "no build" not in capsys.readouterr().out  # not marked as one loads pass over


def test_passing_over_asks_the_hub_nothing_more(remote: FakeHfApi, tmp_path: Path) -> None:
    hf = HfHub(api=remote, cache=tmp_path / "publisher")
    publish(hf, tmp_path / "p1", 1, 1)
    publish(hf, tmp_path / "p2", 2, 2)
    caches = iter(range(100))

    def calls(**selector) -> dict[str, int]:
        api = CountingApi(remote)
        hub = HfHub(api=api, cache=tmp_path / f"cold{next(caches)}")
        loader.get_kernel(REPO, hub=hub, trust_remote_code=True, **selector)
        return api.by_method()

    # the newest branch holds a build: its file list, read to choose the variant anyway,
    # is all the check reads (the refs once, main's list and v2's list, its four files)
    pinned = calls(version=2)
    assert pinned == {"list_repo_refs": 1, "list_repo_tree": 2, "hf_hub_download": 4}
    assert calls() == pinned
    # a branch without a build at main's head: main's list, read for kernel-status.toml,
    # says so, and the load asks what a load of version 1 asks
    branch_without_build(remote, 3)
    assert calls() == calls(version=2)
    # once main moved on (a card published since), that branch's own list is read
    remote.create_commit(REPO, [CommitOperationAdd(path_in_repo="README.md",
                                                   path_or_fileobj=b"# relu, new card\n")],
                         commit_message="card", repo_type="kernel", revision="main")
    assert calls() == {**pinned, "list_repo_tree": 3}


def test_versions_and_info_show_the_branch(hf: HfHub, remote: FakeHfApi, tmp_path: Path,
                                           monkeypatch, capsys) -> None:
    c1 = publish(hf, tmp_path / "p1", 1, 1)
    empty = branch_without_build(remote, 2)
    monkeypatch.setattr("kernelforge.hub.as_hub", lambda hub: hf)
    assert cli.main(["versions", REPO, "--hub", "hf"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"  v2  {empty[:12]}  (no build: a publish of this version may be under way, or one " \
           "that failed left the branch; loads that pin no version pass over it)" in out, out
    assert f"  main  {empty[:12]}" in out, out  # main holds no build by design: no remark
    assert cli.main(["info", REPO, "--hub", "hf", "--trust-remote-code"]) == 0
    out, err = capsys.readouterr()
    assert "branch:     v1\n" in out and f"commit:     {c1}\n" in out, out
    assert (f"  no version requested: version 1 (branch v1), the newest that holds a build "
            f"-> commit {c1[:12]}\n  version 1 is taken, not version 2: its branch v2 "
            f"(revision {empty[:7]}) holds no build (no build/ file)") in out, out
    assert err == "", err
    assert cli.main(["info", REPO, "--hub", "hf", "--version", "2"]) == 1
    out, err = capsys.readouterr()
    assert err.startswith(f"error: {REPO} version 2 (branch v2, revision {empty[:7]}) holds "
                          "no build"), err


def test_lock_takes_the_version_a_load_takes(hf: HfHub, remote: FakeHfApi, tmp_path: Path,
                                             caplog) -> None:
    from kernelforge.lock import lock_project, read_lock

    c1 = publish(hf, tmp_path / "p1", 1, 1)
    branch_without_build(remote, 2)
    project = tmp_path / "app"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        f'[tool.kernelforge.dependencies]\n"{REPO}" = ">=1"\n')
    caplog.set_level(logging.INFO, logger="kernelforge")
    caplog.clear()  # the publish's own lines
    lock_project(project, hub=hf, allow=True)
    locked = read_lock(project / "kernelforge.lock").kernels[REPO]
    assert (locked.branch, locked.commit) == ("v1", c1)
    assert loader.kernel_info(REPO, hub=hf, trust_remote_code=True).commit == c1
    said = warnings_of(caplog)
    assert len(said) == 1 and said[0].startswith(
        f"kernelforge: {REPO}: version 1 is taken, not version 2: its branch v2"), said
    (project / "pyproject.toml").write_text(f'[tool.kernelforge.dependencies]\n"{REPO}" = 2\n')
    with pytest.raises(VariantNotFoundError, match=r"version 2 \(branch v2, revision \w+\) "
                                                   r"holds no build"):
        lock_project(project, hub=hf, allow=True)


def test_a_load_of_an_older_version_is_not_sent_to_the_branch(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, caplog) -> None:
    publish(hf, tmp_path / "p1", 1, 1)
    publish(hf, tmp_path / "p2", 2, 2)
    branch_without_build(remote, 3)
    caplog.set_level(logging.INFO, logger="kernelforge")
    caplog.clear()  # the publishes' own lines
    info = loader.kernel_info(REPO, version=1, hub=hf, trust_remote_code=True)
    assert "a newer version exists: 2" in info.notes, info.notes  # not 3, which holds none
    assert loader.get_kernel(REPO, version=1, hub=hf, trust_remote_code=True).VALUE == 1
    assert warnings_of(caplog) == [f"kernelforge: {REPO}: loading version 1 as requested; "
                                   "version 2 is available (pass version=2 to use it)"]


def test_lock_of_a_dependency_on_that_version_names_who_asks(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path) -> None:
    import json

    from kernelforge.lock import lock_project

    dep = "kernels-test/dep"
    make_variant(tmp_path / "dep", module_id=uid("dep"))
    hf.publish(dep, tmp_path / "dep", version=1)
    remote.create_branch(dep, branch="v2", repo_type="kernel")
    vdir = make_variant(tmp_path / "main", module_id=uid("main"))
    meta = json.loads((vdir / "metadata.json").read_text())
    meta["kernel-depends"] = [{"repo-id": dep, "version": 2}]
    (vdir / "metadata.json").write_text(json.dumps(meta))
    hf.publish(REPO, tmp_path / "main", version=1)
    project = tmp_path / "app"
    project.mkdir()
    (project / "pyproject.toml").write_text(f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    with pytest.raises(VariantNotFoundError) as raised:
        lock_project(project, hub=hf, allow=True)
    said = str(raised.value)
    assert said.startswith(f"{dep} version 2, a kernel-depends entry of {REPO} (variant "
                           f"torch-cpu): {dep} version 2 (branch v2, revision "), said
    assert "holds no build (no build/ file)" in said and "meanwhile version 1" in said, said


def test_the_fixes_named_work(hf: HfHub, remote: FakeHfApi, tmp_path: Path, caplog) -> None:
    publish(hf, tmp_path / "p1", 1, 1)
    branch_without_build(remote, 2)
    caplog.set_level(logging.INFO, logger="kernelforge")
    # publishing that version again fills the branch the killed publish left
    c2 = publish(hf, tmp_path / "p2", 2, 2)
    caplog.clear()
    assert loader.get_kernel(REPO, hub=hf, trust_remote_code=True).VALUE == 2
    assert warnings_of(caplog) == [f"kernelforge: loading {REPO} version 2 (branch v2, "
                                   f"revision {c2[:7]}) \u2014 pass version=2 to pin it"]
    # so does deleting the branch a killed publish left (kernel_info: get_kernel keeps
    # the module it loaded for the same call)
    branch_without_build(remote, 3)
    info = loader.kernel_info(REPO, hub=hf, trust_remote_code=True)
    assert info.commit == c2 and any("not version 3: its branch v3" in note
                                     for note in info.notes), info.notes
    remote.delete_branch(REPO, branch="v3", repo_type="kernel")
    info = loader.kernel_info(REPO, hub=hf, trust_remote_code=True)
    assert info.commit == c2 and not any("holds no build" in note for note in info.notes)


def test_two_branches_without_a_build_are_named_together(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, caplog) -> None:
    c1 = publish(hf, tmp_path / "p1", 1, 1)
    empty = branch_without_build(remote, 2)
    assert branch_without_build(remote, 3) == empty  # both at main's head
    caplog.set_level(logging.INFO, logger="kernelforge")
    caplog.clear()
    assert loader.get_kernel(REPO, hub=hf, trust_remote_code=True).VALUE == 1
    said = warnings_of(caplog)
    assert len(said) == 1, said
    assert said[0].startswith(
        f"kernelforge: loading {REPO} version 1 (branch v1, revision {c1[:7]}) \u2014 pass "
        f"version=1 to pin it; not versions 3, 2: their branches v3 (revision {empty[:7]}) "
        f"and v2 (revision {empty[:7]}) hold no build (no build/ file)"), said
    assert said[0].endswith(
        f"for a branch that stays so, publish its version again (kernelforge publish PROJECT "
        f"--repo {REPO} --hub hf) or delete the branch (hf repos branch delete {REPO} BRANCH "
        "--repo-type kernel)"), said
    with pytest.raises(VariantNotFoundError) as raised:
        loader.get_kernel(REPO, version=3, hub=hf, trust_remote_code=True)
    assert raised.value.fix.endswith("meanwhile version 1 holds a build: load it with "
                                     "version=1 (--version 1 on the command line)")


def test_a_load_of_that_version_is_sent_to_the_older_version(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path) -> None:
    # v2's publish was killed between its branch and its commit; v3 was published since
    publish(hf, tmp_path / "p1", 1, 1)
    branch_without_build(remote, 2)
    publish(hf, tmp_path / "p3", 3, 3)
    assert loader.get_kernel(REPO, hub=hf, trust_remote_code=True).VALUE == 3
    with pytest.raises(VariantNotFoundError) as raised:
        loader.get_kernel(REPO, version=2, hub=hf, trust_remote_code=True)
    # the newest version older than the one asked for, not the newest of all
    assert raised.value.fix.endswith("meanwhile version 1 holds a build: load it with "
                                     "version=1 (--version 1 on the command line)")


def test_an_older_version_that_cannot_be_read_is_left_out_of_the_fix(
        remote: FakeHfApi, tmp_path: Path) -> None:
    c1 = publish(HfHub(api=remote, cache=tmp_path / "publisher"), tmp_path / "p1", 1, 1)
    branch_without_build(remote, 2)

    class Failing(CountingApi):
        def __getattr__(self, name: str):
            if name == "list_repo_tree":
                def listing(*args, revision: str, **kwargs):
                    if revision == c1:
                        raise remote_error("list_repo_tree")
                    return self.api.list_repo_tree(*args, revision=revision, **kwargs)
                return listing
            return super().__getattr__(name)

    def remote_error(method: str) -> BaseException:
        from kf_sharing import hub_error
        return hub_error(method, f"https://huggingface.co/api/kernels/{REPO}/tree", 500)

    hub = HfHub(api=Failing(remote), cache=tmp_path / "cold")
    # the error of the load asked for is said, not the one of the look for its fix
    with pytest.raises(VariantNotFoundError) as raised:
        loader.get_kernel(REPO, version=2, hub=hub, trust_remote_code=True)
    assert "holds no build" in str(raised.value) and "meanwhile" not in raised.value.fix


def test_the_only_version_without_a_build_pinned(hf: HfHub, remote: FakeHfApi) -> None:
    # a first publish killed between its branch and its commit, loaded by its version
    remote.create_repo(REPO, repo_type="kernel")
    empty = branch_without_build(remote, 1)
    with pytest.raises(VariantNotFoundError) as raised:
        loader.get_kernel(REPO, version=1, hub=hf, trust_remote_code=True)
    assert str(raised.value).startswith(f"{REPO} version 1 (branch v1, revision {empty[:7]}) "
                                        "holds no build (no build/ file)"), raised.value
    assert "meanwhile" not in raised.value.fix
    assert not loader.has_kernel(REPO, hub=hf) and not loader.has_kernel(REPO, version=1, hub=hf)


def test_offline_without_the_file_lists(hf: HfHub, remote: FakeHfApi, tmp_path: Path) -> None:
    import shutil

    publish(hf, tmp_path / "p1", 1, 1)
    publish(hf, tmp_path / "p2", 2, 2)
    # a cache without the file lists (lost): what it holds of a commit says it holds a build
    online = HfHub(api=remote, cache=tmp_path / "loaded")
    assert loader.get_kernel(REPO, hub=online, trust_remote_code=True).VALUE == 2
    shutil.rmtree(online.cache.root / "listings")
    assert loader.get_kernel(REPO, hub=online.cache_only(), trust_remote_code=True).VALUE == 2
    # a card published since moved main on; then v3's publish was killed at main's head
    remote.create_commit(REPO, [CommitOperationAdd(path_in_repo="README.md",
                                                   path_or_fileobj=b"# relu, new card\n")],
                         commit_message="card", repo_type="kernel", revision="main")
    branch_without_build(remote, 3)
    # online, the user loaded version 1 only: main's list (v3's) is kept, v2's is not
    user = HfHub(api=remote, cache=tmp_path / "user")
    assert loader.get_kernel(REPO, version=1, hub=user, trust_remote_code=True).VALUE == 1
    offline = user.cache_only()
    with pytest.raises(VariantNotFoundError) as raised:
        loader.get_kernel(REPO, version=3, hub=offline, trust_remote_code=True)
    # offline, whether v2 holds a build cannot be told: the fix does not claim it
    assert raised.value.fix.endswith("--repo-type kernel)"), raised.value.fix
    # nor, without main's list, whether v3 does: version 1 loads all the same
    shutil.rmtree(user.cache.root / "listings")
    assert loader.get_kernel(REPO, version=1, hub=offline, trust_remote_code=True).VALUE == 1


def test_lock_of_a_range_that_only_a_branch_without_a_build_meets(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path) -> None:
    from kernelforge.lock import lock_project

    publish(hf, tmp_path / "p1", 1, 1)
    empty = branch_without_build(remote, 2)
    project = tmp_path / "app"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        f'[tool.kernelforge.dependencies]\n"{REPO}" = ">=2"\n')
    with pytest.raises(VariantNotFoundError) as raised:
        lock_project(project, hub=hf, allow=True)
    # version 1 holds a build: the repository is not said to have none
    assert str(raised.value).startswith(
        f"{REPO} in the Hugging Face Hub has no version >= 2 that holds a build: v2 (revision "
        f"{empty[:7]}) holds no build (no build/ file)"), raised.value
    assert not (project / "kernelforge.lock").exists()


def test_a_kernels_lock_of_a_commit_without_a_build(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, monkeypatch, capsys) -> None:
    import json

    from kernelforge.lock import download_locked

    publish(hf, tmp_path / "p1", 1, 1)
    empty = branch_without_build(remote, 2)
    # Hugging Face's 'kernels lock' pins the newest branch, built or not
    project = tmp_path / "app"
    project.mkdir()
    lock = project / "kernels.lock"
    lock.write_text(json.dumps([{"dependency": {"repo-id": REPO, "version": 2},
                                 "lock": {"commit": empty}}]))
    said = (f"{REPO} (locked revision {empty[:7]} in {lock}) holds no build (no build/ file): "
            "a publish makes a version's branch a moment before the commit that fills it, "
            "and the lock was written from such a branch")
    fix = "lock the project again once the publish is done ('kernelforge lock' passes over"
    loads = [lambda: loader.get_locked_kernel(REPO, lockfile=lock, hub=hf,
                                              trust_remote_code=True),
             lambda: loader.kernel_info(REPO, lockfile=lock, hub=hf),
             # a download fetches nothing rather than report success
             lambda: download_locked(lock, hub=hf, all_variants=True),
             lambda: download_locked(lock, hub=hf),
             lambda: loader.load_kernel(REPO, lockfile=lock, hub=hf, trust_remote_code=True)]
    for load in loads:
        with pytest.raises(VariantNotFoundError) as raised:
            load()
        assert str(raised.value).startswith(said), raised.value
        assert "fits this system" not in str(raised.value), raised.value
        assert raised.value.fix.startswith(fix), raised.value.fix
    monkeypatch.setattr("kernelforge.hub.as_hub", lambda hub: hf)
    for every in (["--all-variants"], []):
        assert cli.main(["download", str(project), *every, "--hub", "hf"]) == 1, every
        out, err = capsys.readouterr()
        assert out == "" and err.startswith(f"error: {said}"), (every, out, err)
    # other files under build/ are no publish's doing: said as before
    other = remote.create_commit(REPO, [CommitOperationAdd(path_in_repo="build/notes.txt",
                                                           path_or_fileobj=b"x")],
                                 commit_message="notes", repo_type="kernel", revision="v2")
    lock.write_text(json.dumps([{"dependency": {"repo-id": REPO, "version": 2},
                                 "lock": {"commit": other.oid}}]))
    with pytest.raises(VariantNotFoundError, match="no build variant of .* fits this system"):
        loader.get_locked_kernel(REPO, lockfile=lock, hub=hf, trust_remote_code=True)


@pytest.mark.parametrize("needs", ["torch-cpu", "torch-cuda"])
@pytest.mark.parametrize("all_variants", [False, True], ids=["here", "all variants"])
def test_a_kernels_lock_dependency_entry_of_a_commit_without_a_build(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, caplog, needs: str,
        all_variants: bool) -> None:
    """A kernels.lock lists the kernel-depends of its kernels beside them. Where the
    entry of one pins a commit that holds no build, a download that would fetch it fails
    saying so; one for this machine (a CPU) whose load takes no variant that needs it
    goes on, and its warning says the commit holds no build, not that nothing fits."""
    import json

    from kernelforge.lock import download_locked

    main = "kernels-test/uses-relu"
    publish(hf, tmp_path / "p1", 1, 1)
    empty = branch_without_build(remote, 2)
    other = "torch-cuda" if needs == "torch-cpu" else "torch-cpu"
    make_variant(tmp_path / "m", other, module_id=uid("other"))
    vdir = make_variant(tmp_path / "m", needs, module_id=uid("needs"))
    meta = json.loads((vdir / "metadata.json").read_text())
    meta["kernel-depends"] = [{"repo-id": REPO, "version": 2}]
    (vdir / "metadata.json").write_text(json.dumps(meta))
    commit = hf.publish(main, tmp_path / "m", version=1, card="# uses relu\n").commit
    lock = tmp_path / "kernels.lock"
    lock.write_text(json.dumps([
        {"dependency": {"repo-id": REPO, "version": 2}, "lock": {"commit": empty}},
        {"dependency": {"repo-id": main, "version": 1}, "lock": {"commit": commit}}]))
    said = (f"{REPO} (locked revision {empty[:7]} in {lock}) holds no build (no build/ "
            "file): a publish makes a version's branch a moment before the commit")
    caplog.set_level(logging.INFO, logger="kernelforge")
    if needs == "torch-cpu" or all_variants:  # a variant fetched needs it
        with pytest.raises(VariantNotFoundError) as raised:
            download_locked(lock, hub=hf, all_variants=all_variants)
        assert str(raised.value).startswith(said), raised.value
        return
    got = download_locked(lock, hub=hf)
    assert [(r, v) for r, v, _ in got] == [(main, "torch-cpu")]
    [line] = [r for r in caplog.records if "is not fetched" in r.getMessage()]
    assert line.levelno == logging.WARNING
    assert line.getMessage().startswith(
        f"kernelforge: {lock}: {REPO} version 2 is not fetched: {said}")
    assert (f"it is only a kernel-depends entry of {main} (variant torch-cuda), which a "
            "load here does not use, but a load of those fails; fix: lock the project "
            "again") in line.getMessage()
    assert "fits this system" not in line.getMessage()
