"""The download cache is private: an entry (or a single cached file) that another user
made is refused, since whoever writes the cache chooses the code that a load of an
allowed, unsigned kernel runs; and a remote listing cannot name a file outside it."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from huggingface_hub import RepoFile
from kf_sharing import FakeHfApi, isolate, make_variant, uid

from kernelforge import loader
from kernelforge.errors import HubError
from kernelforge.hub.hf import HfHub

pytestmark = [pytest.mark.usefixtures("cpu_system"),
              pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX owners")]

REPO = "victim-org/relu"
STRANGER = 54321


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path: Path) -> dict[str, Path]:
    return isolate(monkeypatch, tmp_path)


def _owned_by_a_stranger(path: Path, monkeypatch) -> None:
    """Make ``path``, and only it, another user's file (chown as root; otherwise its
    ``lstat`` reports another owner, which is what the cache reads)."""
    if os.geteuid() == 0:
        os.lchown(path, STRANGER, STRANGER)
        return
    real, target = os.lstat, os.path.abspath(path)

    def lstat(p, *args, **kwargs):
        st = real(p, *args, **kwargs)
        if os.path.abspath(os.fspath(p)) != target:
            return st
        fields = list(st[:10])
        fields[4] = STRANGER  # st_uid
        return os.stat_result(fields)

    monkeypatch.setattr(os, "lstat", lstat)


def _hub(env, tmp_path: Path) -> tuple[HfHub, str]:
    hub = HfHub(api=FakeHfApi(tmp_path / "remote"), cache=env["cache"])
    make_variant(tmp_path / "p", module_id=uid("cache"))
    return hub, hub.publish(REPO, tmp_path / "p", version=1).commit


def test_a_cache_entry_another_user_made_is_refused(env, tmp_path, monkeypatch) -> None:
    hub, commit = _hub(env, tmp_path)
    entry = hub.fetch_variant(REPO, commit, "torch-cpu")
    _owned_by_a_stranger(entry.path.parent / "entry.json", monkeypatch)
    with pytest.raises(HubError, match=r"belongs to another user .*KERNELFORGE_CACHE"):
        loader.get_kernel(REPO, version=1, hub=hub, trust_remote_code=[REPO])


def test_a_cached_file_another_user_made_is_refused(env, tmp_path, monkeypatch) -> None:
    hub, commit = _hub(env, tmp_path)
    path = "build/torch-cpu/metadata.json"
    assert hub.read_file(REPO, commit, path) is not None
    cached = env["cache"] / "files" / REPO / commit / path
    _owned_by_a_stranger(cached, monkeypatch)
    with pytest.raises(HubError, match="belongs to another user"):
        hub.read_file(REPO, commit, path)


def test_the_users_own_cache_loads(env, tmp_path) -> None:
    hub, _commit = _hub(env, tmp_path)
    assert loader.get_kernel(REPO, version=1, hub=hub, trust_remote_code=[REPO]).VALUE == 1


@pytest.mark.parametrize("planted", [
    "build/torch-cpu/../../../../escaped.txt",
    "build/torch-cpu/./x.py",
    "build//torch-cpu/x.py",
    "/build/torch-cpu/x.py",
    "build/torch-cpu/a\\..\\x.py",
])
def test_a_listing_with_a_path_outside_the_revision_is_refused(env, tmp_path, planted) -> None:
    api = FakeHfApi(tmp_path / "remote")
    hub = HfHub(api=api, cache=env["cache"])
    make_variant(tmp_path / "p", module_id=uid("listing"))
    commit = hub.publish(REPO, tmp_path / "p", version=1).commit
    real = api.list_repo_tree

    def listing(*args, **kwargs):
        yield from real(*args, **kwargs)
        yield RepoFile(path=planted, size=1, oid="0" * 40)

    api.list_repo_tree = listing  # type: ignore[method-assign]
    with pytest.raises(HubError, match=r"lists the file .* not a plain path inside the "
                                       r"revision; refusing"):
        loader.get_kernel(REPO, version=1, hub=hub, trust_remote_code=[REPO])
    assert not list(tmp_path.rglob("escaped.txt"))
    listed = hub.cache.load_listing(REPO, commit)  # the refused listing is not kept
    assert listed is None or planted not in listed


@pytest.mark.parametrize("kind", ["heads", "tags"])
@pytest.mark.parametrize("target", ["../../../../escaped", "ABC", "0" * 39, "v1"])
def test_refs_that_name_no_commit_are_refused(env, tmp_path, kind, target) -> None:
    """A hub whose branch or tag points at something that is no commit id is refused as
    damaged or hostile (not a ValueError, which says the caller's argument was wrong),
    and its refs are not kept for offline loads."""
    api = FakeHfApi(tmp_path / "remote")
    hub = HfHub(api=api, cache=env["cache"])
    make_variant(tmp_path / "p", module_id=uid("refs"))
    hub.publish(REPO, tmp_path / "p", version=1)
    ref = tmp_path / "remote" / "repos" / REPO / "refs" / kind / ("v1" if kind == "heads"
                                                                  else "t1")
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text(target)
    with pytest.raises(HubError, match=rf"lists the (branch|tag) .* at '{re.escape(target)}', "
                                       r"which is not a commit id; refusing"):
        loader.get_kernel(REPO, version=1, hub=hub, trust_remote_code=[REPO])
    kept = hub.cache.load_refs(REPO)  # those the publish saw, if any: not the bad ones
    assert kept is None or target not in {**kept[0], **kept[1]}.values()
    assert not list(tmp_path.rglob("escaped*"))


@pytest.mark.parametrize("level", ["", "variants", "variants/victim-org",
                                   "variants/victim-org/relu", "variants/victim-org/relu/C"])
def test_a_folder_above_an_entry_another_user_made_is_refused(env, tmp_path, monkeypatch,
                                                              level) -> None:
    # whoever owns a folder can rename what it holds: another commit's entry, ours,
    # moved to where this commit's is looked for
    hub, commit = _hub(env, tmp_path)
    hub.fetch_variant(REPO, commit, "torch-cpu")
    folder = env["cache"] / level.replace("C", commit)
    assert folder.is_dir()
    _owned_by_a_stranger(folder, monkeypatch)
    with pytest.raises(HubError, match=rf"{folder}: .*belongs to another user"):
        loader.get_kernel(REPO, version=1, hub=hub, trust_remote_code=[REPO])


def test_a_folder_above_a_cached_file_another_user_made_is_refused(env, tmp_path,
                                                                   monkeypatch) -> None:
    hub, commit = _hub(env, tmp_path)
    path = "build/torch-cpu/metadata.json"
    assert hub.read_file(REPO, commit, path) is not None
    folder = env["cache"] / "files" / REPO / commit / "build"
    _owned_by_a_stranger(folder, monkeypatch)
    with pytest.raises(HubError, match=rf"{folder}: .*belongs to another user"):
        hub.read_file(REPO, commit, path)


def test_a_link_below_the_root_is_refused(env, tmp_path) -> None:
    # a folder of the cache swapped for a link leads the load elsewhere: refused whoever
    # owns the link and what it leads to
    hub, commit = _hub(env, tmp_path)
    hub.fetch_variant(REPO, commit, "torch-cpu")
    org = env["cache"] / "variants" / "victim-org"
    moved = tmp_path / "moved-org"
    org.rename(moved)
    org.symlink_to(moved, target_is_directory=True)
    with pytest.raises(HubError, match=rf"{org}: a symbolic link in the download cache"):
        loader.get_kernel(REPO, version=1, hub=hub, trust_remote_code=[REPO])


def test_a_root_that_is_a_link_is_judged_where_it_leads(env, tmp_path, monkeypatch) -> None:
    hub, commit = _hub(env, tmp_path)
    hub.fetch_variant(REPO, commit, "torch-cpu")
    link = tmp_path / "cache-link"
    link.symlink_to(env["cache"], target_is_directory=True)
    linked = HfHub(api=hub._api, cache=link)
    # the user's own cache reached through a link of theirs loads
    assert loader.get_kernel(REPO, version=1, hub=linked, trust_remote_code=[REPO]).VALUE == 1
    # and the folder it leads to, another user's, is refused
    if os.geteuid() == 0:
        os.chown(env["cache"], STRANGER, STRANGER)
    else:
        real, target = os.stat, os.path.abspath(env["cache"])

        def stat_(p, *args, **kwargs):
            st = real(p, *args, **kwargs)
            if os.path.realpath(os.fspath(p)) != target:
                return st
            fields = list(st[:10])
            fields[4] = STRANGER
            return os.stat_result(fields)
        monkeypatch.setattr(os, "stat", stat_)
    again = HfHub(api=hub._api, cache=link)
    with pytest.raises(HubError, match=rf"{link}: this download cache folder belongs to "
                                       "another user"):
        # (another trust argument: not the module the call above loaded)
        loader.get_kernel(REPO, version=1, hub=again, trust_remote_code=True)


@pytest.mark.parametrize(("mode", "refused"), [(0o777, True), (0o1777, False), (0o775, False)])
def test_a_folder_every_user_may_write_is_refused(env, tmp_path, mode: int,
                                                  refused: bool) -> None:
    hub, commit = _hub(env, tmp_path)
    path = "build/torch-cpu/metadata.json"
    assert hub.read_file(REPO, commit, path) is not None
    folder = env["cache"] / "files" / REPO
    folder.chmod(mode)
    if refused:
        with pytest.raises(HubError, match=rf"{folder}: this download cache folder may be "
                                           r"written by every user.*chmod o-w"):
            hub.read_file(REPO, commit, path)
    else:  # sticky, or writable by the group alone (a user's private group)
        assert hub.read_file(REPO, commit, path) is not None


def test_the_cache_makes_no_folder_every_user_may_write_whatever_the_umask(
        env, tmp_path) -> None:
    # under umask 000 its own folders would otherwise be refused on the next load
    old = os.umask(0)
    try:
        hub, _commit = _hub(env, tmp_path)
        assert loader.get_kernel(REPO, version=1, hub=hub, trust_remote_code=[REPO]).VALUE == 1
    finally:
        os.umask(old)
    folders = [p for p in env["cache"].rglob("*") if p.is_dir()]
    assert folders and all(not p.stat().st_mode & 0o002 for p in [env["cache"], *folders])


def test_make_dirs_answers_as_path_mkdir_does(tmp_path) -> None:
    from kernelforge.cache import make_dirs

    make_dirs(tmp_path / "a" / "b")
    make_dirs(tmp_path / "a" / "b")  # there already: fine
    with pytest.raises(FileExistsError):
        make_dirs(tmp_path / "a" / "b", exist_ok=False)
    (tmp_path / "f").write_text("")
    with pytest.raises(FileExistsError):
        make_dirs(tmp_path / "f")  # a file where the folder should be
    with pytest.raises((FileExistsError, NotADirectoryError)):
        make_dirs(tmp_path / "f" / "below")
