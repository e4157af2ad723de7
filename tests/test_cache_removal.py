"""What ``kernelforge cache remove|clear`` must never do: remove outside the cache (through
a link, in a directory that is no cache, or one another tool tagged), remove less or more
than asked, break a download running beside it, or hang or crash on odd on-disk states."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kf_sharing import FakeHfApi, isolate, make_variant, uid

from kernelforge import _durable, loader
from kernelforge import cache as cache_mod
from kernelforge.cache import DownloadCache
from kernelforge.cli import main
from kernelforge.errors import HubError
from kernelforge.hub.hf import HfHub

pytestmark = pytest.mark.usefixtures("cpu_system")
A1 = "1" * 40


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path: Path) -> dict[str, Path]:
    return isolate(monkeypatch, tmp_path)


def _fill(d: Path) -> None:
    (d / "x.py").write_text("X = 1\n")


def _small_cache(root: Path) -> DownloadCache:
    cache = DownloadCache(root)
    cache.install("org/a", A1, "torch-cpu", _fill, lambda d: {})
    assert (root / "CACHEDIR.TAG").is_file()  # a cache the cache made is tagged
    return cache


def test_each_spelling_of_a_repository_id_reaches_its_cache_entries(env) -> None:
    """Repository ids ignore case: an entry cached as ``org/a`` is found, and removed,
    under ``ORG/A``; a cache holding two spellings (each first cached at once, or by a
    version that kept them apart) serves both and loses both on a removal."""
    root = env["cache"]
    cache = _small_cache(root)
    assert cache.entry("ORG/A", A1, "torch-cpu") is not None
    cache.install("Org/A", A1, "torch-cuda", _fill, lambda d: {})  # joins org/a
    assert sorted(p.name for p in (root / "variants").iterdir()) == ["org"]
    b1 = "2" * 40
    spelled = root / "variants" / "Org" / "A" / b1 / "torch-cpu"  # as kept apart before
    (spelled / "files").mkdir(parents=True)
    (spelled / "entry.json").write_text('{"files": {}}')
    assert cache.entry("org/a", b1, "torch-cpu") is not None
    assert cache.known_commits("oRg/a") == [A1, b1]
    cache.save_refs("org/a", {"v1": A1}, {})
    assert cache.load_refs("ORG/A") == ({"v1": A1}, {})
    removed = cache.remove("ORG/A")
    assert sorted((v.repo_id, v.commit, v.variant) for v in removed.variants) == [
        ("Org/A", b1, "torch-cpu"), ("org/a", A1, "torch-cpu"), ("org/a", A1, "torch-cuda")]
    assert cache.entries() == [] and cache.load_refs("org/a") is None


def test_a_directory_loaded_into_by_mistake_is_not_tagged_nor_cleared(tmp_path,
                                                                      capsys) -> None:
    project = tmp_path / "project"
    (project / "files").mkdir(parents=True)
    (project / "files" / "thesis.tex").write_text("mine")
    (project / "tmp").mkdir()
    (project / "tmp" / "draft.txt").write_text("mine too")
    hub = HfHub(api=FakeHfApi(tmp_path / "remote"), cache=project)
    make_variant(tmp_path / "p", module_id=uid("m"))
    hub.publish("org/relu", tmp_path / "p", version=1)
    loader.get_kernel("org/relu", version=1, hub=hub, trust_remote_code=["org/relu"])
    assert not (project / "CACHEDIR.TAG").exists()
    assert main(["cache", "clear", "--cache", str(project)]) == 1
    assert "does not look like a kernelforge download cache" in capsys.readouterr().err
    assert (project / "files" / "thesis.tex").read_text() == "mine"
    assert (project / "tmp" / "draft.txt").read_text() == "mine too"


def test_another_tools_cache_tag_does_not_make_a_kernelforge_cache(tmp_path) -> None:
    target = tmp_path / "target"
    (target / "tmp").mkdir(parents=True)
    (target / "CACHEDIR.TAG").write_bytes(
        b"Signature: 8a477f597d28d172789f06886806bc55\n# a build tool's cache\n")
    (target / "tmp" / "fixture.db").write_text("keep")
    (target / "debug").mkdir()
    assert main(["cache", "clear", "--cache", str(target)]) == 1
    assert (target / "tmp" / "fixture.db").read_text() == "keep"


@pytest.mark.parametrize("linked", ["files", "listings", "variants"])
def test_nothing_is_removed_through_a_link(env, tmp_path, linked) -> None:
    root = env["cache"]
    _small_cache(root)
    outside = tmp_path / "work"
    (outside / "relu").mkdir(parents=True)
    (outside / "relu" / "precious.txt").write_text("not the cache's")
    (root / linked).mkdir(exist_ok=True)
    os.symlink(outside, root / linked / "org-c")
    main(["cache", "remove", "org-c/relu"])
    assert (outside / "relu" / "precious.txt").read_text() == "not the cache's"
    assert main(["cache", "clear"]) == 0
    assert (outside / "relu" / "precious.txt").read_text() == "not the cache's"
    assert not (root / linked / "org-c").is_symlink()  # the link itself went


@pytest.mark.parametrize("part", ["tmp", "locks"])
@pytest.mark.parametrize("kind", ["link", "file"])
def test_a_cache_folder_that_is_a_link_or_a_file_is_refused(env, tmp_path, capsys, part,
                                                           kind) -> None:
    root = env["cache"]
    _small_cache(root)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "report.pdf").write_text("x")
    shutil.rmtree(root / part)
    if kind == "link":
        os.symlink(scratch, root / part)
    else:
        (root / part).write_text("x")
    assert main(["cache", "clear"]) == 1
    assert "where the download cache keeps a folder" in capsys.readouterr().err
    assert (scratch / "report.pdf").exists()
    assert DownloadCache(root).entry("org/a", A1, "torch-cpu") is not None


def test_a_cache_root_that_is_a_link_is_cleared_in_place(tmp_path) -> None:
    real = tmp_path / "real-cache"
    _small_cache(real)
    link = tmp_path / "link-cache"
    os.symlink(real, link)
    assert main(["cache", "clear", "--cache", str(link)]) == 0
    assert link.is_symlink()
    assert sorted(p.name for p in real.iterdir()) == ["CACHEDIR.TAG", "locks", "tmp"]


def test_an_empty_list_of_commits_removes_nothing(env) -> None:
    cache = _small_cache(env["cache"])
    cache.install("org/a", "2" * 40, "torch-cpu", _fill, lambda d: {})
    assert cache.commits_matching("org/a", "ffff") == []
    removed = cache.remove("org/a", commits=[])
    assert removed.variants == [] and removed.other_bytes == 0
    assert len(cache.variants()) == 2



class _Killed(BaseException):
    """The process dying at this point: nothing after it runs, no cleanup either."""


def _dies_deleting_what_it_renamed_away(monkeypatch) -> None:
    """Make the cache stop dead where it deletes a folder of ``tmp/`` (what it renamed
    away, or a fetch's temporary once its file is in place), as a process killed then."""
    remove = cache_mod._remove

    def dying(path: Path) -> None:
        if path.parent.name == "tmp":
            raise _Killed
        remove(path)

    monkeypatch.setattr(cache_mod, "_remove", dying)


def test_a_removal_killed_halfway_is_finished_by_running_it_again(env, monkeypatch,
                                                                  capsys) -> None:
    """Killed after the entry was renamed away, before it was deleted: the entry is gone
    at once, and the same command run again deletes what it left in ``tmp/`` rather
    than saying there is nothing to remove."""
    _small_cache(env["cache"])
    remove = cache_mod._remove
    _dies_deleting_what_it_renamed_away(monkeypatch)
    with pytest.raises(_Killed):
        main(["cache", "remove", "org/a"])
    monkeypatch.setattr(cache_mod, "_remove", remove)
    assert DownloadCache(env["cache"]).variants() == []
    (left,) = (env["cache"] / "tmp").iterdir()
    assert (left / "old" / "files" / "x.py").is_file()
    capsys.readouterr()

    assert main(["cache", "remove", "org/a"]) == 0, capsys.readouterr().err
    assert "removed 0 variants of org/a" in capsys.readouterr().out
    assert list((env["cache"] / "tmp").iterdir()) == []


def test_what_a_killed_fetch_left_goes_with_the_next_write_but_a_running_ones_stays(
        env, monkeypatch) -> None:
    """A fetch of a single file killed once the file is in place leaves its temporary
    folder, and no later fetch of that file comes to remove it: the next write of any
    key does, leaving the folder of a write that is still running (its lock held)."""
    import filelock

    cache = _small_cache(env["cache"])
    remove = cache_mod._remove
    _dies_deleting_what_it_renamed_away(monkeypatch)
    with pytest.raises(_Killed):
        cache.get_file("org/a", A1, "README.md", lambda p: p.write_bytes(b"# a") or True)
    monkeypatch.setattr(cache_mod, "_remove", remove)
    assert cache.peek_file("org/a", A1, "README.md") == b"# a"
    (dead,) = (env["cache"] / "tmp").iterdir()
    running = env["cache"] / "tmp" / f"{'b' * 32}.beef02"
    running.mkdir()

    with filelock.FileLock(str(env["cache"] / "locks" / f"{'b' * 32}.lock")):
        cache.install("org/a", "2" * 40, "torch-cpu", _fill, lambda d: {})
    assert [p.name for p in (env["cache"] / "tmp").iterdir()] == [running.name]
    assert not dead.exists()


def test_an_untagged_cache_with_an_interrupted_write_is_still_recognised(env) -> None:
    root = env["cache"]
    cache = _small_cache(root)
    cache.save_refs("org/a", {"v1": A1}, {})
    (root / "refs" / "org" / ".a.json.0123456789ab.tmp").write_text("{")
    (root / "CACHEDIR.TAG").unlink()
    assert main(["cache", "clear"]) == 0
    assert not (root / "refs").exists()


def test_a_tag_that_is_a_fifo_does_not_hang(tmp_path) -> None:
    root = tmp_path / "c"
    root.mkdir()
    os.mkfifo(root / "CACHEDIR.TAG")
    code = ("import sys; from kernelforge.cli import main; "
            f"sys.exit(main(['cache', 'clear', '--cache', {str(root)!r}]))")
    run = subprocess.run([sys.executable, "-c", code], timeout=60, capture_output=True,
                         text=True)
    assert run.returncode == 1 and "does not look like" in run.stderr, run.stderr


def test_a_download_beside_a_removal_that_prunes_its_folder_completes(env,
                                                                      monkeypatch) -> None:
    root = env["cache"]
    cache = _small_cache(root)
    final = root / "variants" / "org" / "a" / A1 / "torch-cuda"
    real_rename = os.rename
    done = []

    def rename(src, dst, *args, **kwargs):
        if Path(dst) == final and not done:  # another process removes the sibling now
            done.append(True)
            DownloadCache(root).remove("org/a", commits=[A1], variant="torch-cpu")
        return real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(cache_mod.os, "rename", rename)
    cache.install("org/a", A1, "torch-cuda", _fill, lambda d: {})
    assert done and cache.entry("org/a", A1, "torch-cuda") is not None
    assert cache.entry("org/a", A1, "torch-cpu") is None


def test_older_than_is_judged_again_under_the_lock(env, monkeypatch) -> None:
    root = env["cache"]
    cache = _small_cache(root)
    entry = root / "variants" / "org" / "a" / A1 / "torch-cpu" / "entry.json"
    os.chmod(entry, 0o644)
    entry.write_text(entry.read_text().replace('"time":', '"time": 1, "was":'))  # long ago
    real = DownloadCache._discard_entry

    def racing(self, repo_id, commit, variant, *args):
        other = DownloadCache(root)  # another process fetches it anew right now
        other.discard(repo_id, commit, variant)
        other.install(repo_id, commit, variant, _fill, lambda d: {})
        return real(self, repo_id, commit, variant, *args)

    monkeypatch.setattr(DownloadCache, "_discard_entry", racing)
    assert cache.remove(older_than=30 * 86400).variants == []
    assert cache.entry("org/a", A1, "torch-cpu") is not None


def _age(entry: Path, days: float) -> None:
    """Set the modification time of an entry's folder and everything in it ``days`` back."""
    when = time.time() - days * 86400
    for path in [entry, *entry.rglob("*")]:
        os.utime(path, (when, when), follow_symlinks=False)


@pytest.mark.parametrize("written", ["damaged-again", "fetched-again"])
def test_older_than_waits_for_an_entry_being_written_and_judges_what_was_written(
        env, written) -> None:
    """An entry whose lock another process holds is being written now: a removal by age
    waits for the lock and judges the entry by what it holds then. A damaged entry.json
    written meanwhile is dated by its modification time, so kept (and reported); before,
    it counted as old and went the moment the writer let go. A fresh, whole record is
    kept without a word, as any entry fetched within the age."""
    import threading

    root = env["cache"]
    cache = _small_cache(root)
    entry = root / "variants" / "org" / "a" / A1 / "torch-cpu"
    record = entry / "entry.json"
    sound = json.loads(record.read_text())
    record.chmod(0o644)
    record.write_bytes(b'{"format": 1, "fi')  # left cut short, long ago
    _age(entry, 40)
    assert record.stat().st_mtime < time.time() - 30 * 86400

    done: list[cache_mod.Removed] = []
    remover = threading.Thread(target=lambda: done.append(
        DownloadCache(root).remove(older_than=30 * 86400)))
    with DownloadCache(root)._lock(DownloadCache._key("variant", "org/a",
                                                      f"{A1}/torch-cpu")):
        remover.start()
        remover.join(1.0)
        assert remover.is_alive() and record.is_file()  # it waits for the writer
        if written == "damaged-again":
            record.write_bytes(b'{"format": 1, "files": {"x.py": "')
        else:
            record.write_text(json.dumps({**sound, "time": time.time()}))
    remover.join(60)
    assert not remover.is_alive()
    [removed] = done
    assert removed.variants == [] and record.is_file()
    if written == "damaged-again":
        [kept] = removed.kept
        assert kept.damaged == "its entry.json is not valid JSON"
        assert kept.modified is not None and abs(kept.modified - time.time()) < 600
    else:
        assert removed.kept == []
        [listed] = cache.variants()
        assert listed.fetched is not None and abs(listed.fetched - time.time()) < 600


@pytest.mark.parametrize("older_than", [-1, -0.5, float("nan"), float("inf"), True, "30"])
def test_older_than_that_is_no_age_is_refused(env, older_than) -> None:
    """As ``cache clear --older-than`` refuses it. Before: -1 removed every variant (each
    was fetched more than -1 seconds ago), NaN and infinity only the undated ones."""
    cache = _small_cache(env["cache"])
    with pytest.raises(ValueError, match=r"^older_than: expected a number of seconds, 0 "
                                         r"or more, got "):
        cache.remove(older_than=older_than)
    assert cache.entry("org/a", A1, "torch-cpu") is not None
    assert cache.remove(older_than=0).variants[0].variant == "torch-cpu"


def _by_a_newer_kernelforge(root: Path, commit: str, when: float | None) -> Path:
    """Cache ``org/a`` at ``commit`` and rewrite its entry.json as a newer kernelforge
    writes it: a higher format, fields this version does not know, and ``time`` only where
    ``when`` is given. Returns the entry.json."""
    DownloadCache(root).install("org/a", commit, "torch-cpu", _fill, lambda d: {})
    record = root / "variants" / "org" / "a" / commit / "torch-cpu" / "entry.json"
    record.chmod(0o644)
    doc: dict[str, object] = {"format": 2, "blobs": {"x.py": "sha256-..."}}
    if when is not None:
        doc["time"] = when
    record.write_text(json.dumps(doc))
    return record


def test_cache_list_shows_a_newer_kernelforge_s_entry_as_its_own(env, capsys) -> None:
    """Not as damaged, which said that a load online fetches it again (a load refuses
    it), and with the fetch time it records where this version can read one."""
    root = env["cache"]
    _by_a_newer_kernelforge(root, "a" * 40, None)
    _by_a_newer_kernelforge(root, "b" * 40, 1.0)
    capsys.readouterr()
    assert main(["cache", "list", "--cache", str(root)]) == 0
    listed = capsys.readouterr().out
    assert "damaged:" not in listed, listed
    for commit in ("a" * 12, "b" * 12):
        assert (f"newer: org/a {commit} torch-cpu: its entry.json is of format 2, written "
                "by a newer kernelforge; this version cannot use it and leaves it as it is: "
                "a load here refuses it" in listed), listed
    assert main(["cache", "list", "--json", "--cache", str(root)]) == 0
    rows = {v["commit"][0]: v for v in json.loads(capsys.readouterr().out)}
    assert {c: (v["newer-format"], v["damaged"], v["fetched"]) for c, v in rows.items()} == {
        "a": (2, None, None), "b": (2, None, 1.0)}


def test_older_than_keeps_a_newer_kernelforge_s_entries_it_cannot_date(env,
                                                                       capsys) -> None:
    """An entry a newer kernelforge wrote is not this version's to judge: ``cache clear
    --older-than`` removes it only where it records a fetch time this version can read
    that is that old, and keeps one that records none, saying so and how to remove it.
    Before, every such entry counted as undated, so as old: one fetched a minute earlier
    by the newer version sharing the cache was removed as "fetched more than 30 days
    ago"."""
    root = env["cache"]
    undated = _by_a_newer_kernelforge(root, "a" * 40, None)
    expired = _by_a_newer_kernelforge(root, "b" * 40, 1.0)  # 1970: plainly old
    recent = _by_a_newer_kernelforge(root, "c" * 40, time.time() - 60)
    kept_text = undated.read_text()
    capsys.readouterr()
    assert main(["cache", "clear", "--older-than", "30", "--cache", str(root)]) == 0
    out = capsys.readouterr().out
    assert undated.read_text() == kept_text and recent.is_file()
    assert not expired.parent.exists()
    assert ("removed 1 variant fetched more than 30 days ago" in out
            and f"  org/a  {'b' * 12}  torch-cpu  " in out
            and "(written by a newer kernelforge: entry format 2)" in out), out
    assert ("kept 1 variant written by a newer kernelforge, whose entry records no fetch "
            "time this version can read" in out), out
    assert f"  org/a  {'a' * 12}  torch-cpu  " in out.split("kept 1 variant")[1], out
    # (the cache of $KERNELFORGE_CACHE, so no --cache)
    assert f"or name it: 'kernelforge cache remove org/a --revision {'a' * 12}'" in out, out
    assert "c" * 12 not in out  # fetched a minute ago: kept without a word, as any

    # the API says the same; naming the repository removes it, as the message says
    removed = DownloadCache(root).remove(older_than=0)
    assert [v.commit for v in removed.variants] == ["c" * 40]
    assert [(v.commit, v.newer_format) for v in removed.kept] == [("a" * 40, 2)]
    assert [v.commit for v in DownloadCache(root).remove("org/a").variants] == ["a" * 40]
    assert not undated.exists()


def test_older_than_judges_a_newer_kernelforge_s_entry_again_under_its_lock(
        env, monkeypatch) -> None:
    """What a removal by age lists can be stale by the time it takes an entry's lock: an
    entry listed as fetched long ago that the newer kernelforge sharing the cache has
    fetched again meanwhile, recording no time this version can read, is kept, as it is
    when listed so."""
    root = env["cache"]
    record = _by_a_newer_kernelforge(root, "a" * 40, 1.0)  # 1970: old, as listed
    cache = DownloadCache(root)
    listed = cache.variants()
    assert [v.fetched for v in listed] == [1.0]
    monkeypatch.setattr(DownloadCache, "variants", lambda self: listed)
    record.write_text(json.dumps({"format": 2, "blobs": {}}))  # its time gone since
    assert cache.remove(older_than=0).variants == []
    assert json.loads(record.read_text()) == {"format": 2, "blobs": {}}


@pytest.mark.parametrize(("link", "target", "commits"), [
    ("files/org-c", "relu", ["2" * 40]), ("refs", "org-c", None)])
def test_no_empty_folder_outside_the_cache_is_pruned(env, tmp_path, link, target,
                                                     commits) -> None:
    root = env["cache"]
    _small_cache(root)
    outside = tmp_path / "work"
    (outside / target).mkdir(parents=True)
    (root / link).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(outside, root / link)
    DownloadCache(root).remove("org-c/relu", commits=commits)
    assert (outside / target).is_dir()


def test_a_directory_that_existed_is_never_tagged(tmp_path, capsys) -> None:
    """Only a root the cache makes is tagged: a project directory named by mistake,
    empty at the first load, keeps being checked for the cache's layout."""
    project = tmp_path / "project"
    project.mkdir()
    hub = HfHub(api=FakeHfApi(tmp_path / "remote"), cache=project)
    make_variant(tmp_path / "p", module_id=uid("m"))
    hub.publish("org/relu", tmp_path / "p", version=1)
    loader.get_kernel("org/relu", version=1, hub=hub, trust_remote_code=["org/relu"])
    assert not (project / "CACHEDIR.TAG").exists()
    (project / "files" / "thesis.tex").write_text("mine")  # the user's work, later
    assert main(["cache", "clear", "--cache", str(project)]) == 1
    assert (project / "files" / "thesis.tex").read_text() == "mine"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["cache", "clear", "--cache", str(empty)]) == 0
    assert not (empty / "CACHEDIR.TAG").exists()


def test_a_fetched_file_is_returned_whatever_a_removal_does_meanwhile(env,
                                                                      monkeypatch) -> None:
    root = env["cache"]
    cache = _small_cache(root)
    real = _durable.fsync_dir
    done = []

    def fsync_then_clear(path):
        real(path)
        if not done and "files" in Path(path).parts:
            done.append(True)
            DownloadCache(root).remove()  # another process's 'kernelforge cache clear'

    monkeypatch.setattr(cache_mod._durable, "fsync_dir", fsync_then_clear)

    def fetch(dest: Path) -> bool:
        dest.write_bytes(b"signature")
        return True

    assert cache.get_file("org/a", A1, "build/torch-cpu.sig", fetch) == b"signature"
    assert done


def test_refs_are_saved_beside_a_removal_pruning_their_folder(env, monkeypatch) -> None:
    root = env["cache"]
    cache = DownloadCache(root)
    cache.save_refs("org/a", {"main": A1}, {})
    real = _durable.replace_file

    def racing(path, data, **kwargs):
        if Path(path).name == "b.json":  # org/a's refs, in the same folder, go now
            DownloadCache(root).remove("org/a")
        return real(path, data, **kwargs)

    monkeypatch.setattr(cache_mod._durable, "replace_file", racing)
    cache.save_refs("org/b", {"main": A1}, {})
    assert cache.load_refs("org/b") == ({"main": A1}, {})


def test_a_folder_pruned_while_its_subfolder_is_made_is_made_again(env,
                                                                   monkeypatch) -> None:
    """A removal prunes the commit's folder, empty, just after this download made it and
    before it made the folder below: made again, not a "No such file or directory"
    error that says the cache cannot be written."""
    root = env["cache"]
    cache = _small_cache(root)
    real = os.mkdir
    pruned = []

    def mkdir(path, *args, **kwargs):
        folder = Path(path)
        if folder.name == "build" and folder.parent.name == A1 and not pruned:
            pruned.append(True)
            os.rmdir(folder.parent)  # another process's 'kernelforge cache clear'
        return real(path, *args, **kwargs)

    monkeypatch.setattr(cache_mod.os, "mkdir", mkdir)

    def fetch(dest: Path) -> bool:
        dest.write_bytes(b"signature")
        return True

    assert cache.get_file("org/a", A1, "build/torch-cpu.sig", fetch) == b"signature"
    assert pruned
    assert (root / "files" / "org" / "a" / A1 / "build" / "torch-cpu.sig").is_file()


def test_a_cache_whose_folders_keep_vanishing_says_to_run_again(env, monkeypatch) -> None:
    """What a removal in another process took away however often it is made again: the
    fix is to run again, not to point KERNELFORGE_CACHE elsewhere."""
    import errno

    def vanished(path: Path, data: bytes, **kwargs) -> None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))

    monkeypatch.setattr(cache_mod._durable, "replace_file", vanished)
    root = env["cache"]
    with pytest.raises(HubError) as info:
        DownloadCache(root).save_refs("org/a", {"main": A1}, {})
    assert str(info.value).startswith(f"writing to the download cache {root} failed (No such "
                                      "file or directory: ")
    assert str(info.value).endswith(
        "); nothing was cached; fix: run it again: its folders were removed while this "
        "wrote to them (by 'kernelforge cache remove' or 'clear' in another process, say), "
        "and the next run fetches what it needs anew"), info.value


def test_a_cache_deleted_by_hand_is_made_again(env, tmp_path) -> None:
    hub = HfHub(api=FakeHfApi(tmp_path / "remote"), cache=env["cache"])
    make_variant(tmp_path / "p", module_id=uid("m"))
    commit = hub.publish("org/relu", tmp_path / "p", version=1).commit
    assert hub.read_file("org/relu", commit, "build/torch-cpu/metadata.json")
    shutil.rmtree(env["cache"])  # rm -rf: the usual way to clear a cache
    assert hub.read_file("org/relu", commit, "build/torch-cpu/metadata.json")
    assert (env["cache"] / "CACHEDIR.TAG").is_file()


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_load_whose_cached_copy_is_removed_meanwhile_says_so(env, tmp_path, monkeypatch,
                                                                when) -> None:
    """Another process's ``kernelforge cache clear`` after the load verified the cached
    copy but before it imported it: the error says the copy was removed and that a new
    load fetches it, not that the kernel is no kernel package (or a bare
    FileNotFoundError); and a new load does fetch it."""
    hub = HfHub(api=FakeHfApi(tmp_path / "remote"), cache=env["cache"])
    make_variant(tmp_path / "p", module_id=uid("gone"), value=7)
    hub.publish("org/relu", tmp_path / "p", version=1)
    real = loader._package_init

    def racing(variant_dir, meta):
        if when == "before":
            DownloadCache(env["cache"]).remove()
        found = real(variant_dir, meta)
        if when == "after":
            DownloadCache(env["cache"]).remove()
        return found

    monkeypatch.setattr(loader, "_package_init", racing)
    with pytest.raises(HubError, match="removed from the download cache while it was "
                                       "loading") as caught:
        loader.get_kernel("org/relu", version=1, hub=hub, trust_remote_code=True)
    assert "load it again" in str(caught.value)
    monkeypatch.setattr(loader, "_package_init", real)
    assert loader.get_kernel("org/relu", version=1, hub=hub, trust_remote_code=True).VALUE == 7


def test_an_offline_load_whose_cached_copy_is_removed_meanwhile_names_the_fetch(
        env, tmp_path, monkeypatch) -> None:
    """Offline a new load cannot fetch the removed copy: the error says to fetch it while
    online rather than that a new load fetches it."""
    api = FakeHfApi(tmp_path / "remote")
    make_variant(tmp_path / "p", module_id=uid("gone"), value=7)
    online = HfHub(api=api, cache=env["cache"])
    commit = online.publish("org/relu", tmp_path / "p", version=1).commit
    loader.kernel_info("org/relu", version=1, hub=online)  # refs and metadata.json
    online.fetch_variant("org/relu", commit, "torch-cpu")  # cached while online
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    real = loader._package_init

    def racing(variant_dir, meta):
        DownloadCache(env["cache"]).remove()
        return real(variant_dir, meta)

    monkeypatch.setattr(loader, "_package_init", racing)
    with pytest.raises(HubError, match="removed from the download cache while it was "
                                       r"loading.*fetch it again while online"):
        loader.get_kernel("org/relu", version=1, hub=HfHub(api=api, cache=env["cache"]),
                          trust_remote_code=True)
