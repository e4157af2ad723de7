"""``kernelforge cache``: list the download cache, remove a repository's, a revision's or a
variant's files, clear it (or only what was fetched long ago), and never remove anything
from a directory that is not a download cache."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path

import filelock
import pytest
from kf_sharing import FakeHfApi, isolate, make_variant, uid

from kernelforge import cache as cache_mod
from kernelforge import loader
from kernelforge.cache import DownloadCache
from kernelforge.cli import main
from kernelforge.hub.hf import HfHub

pytestmark = pytest.mark.usefixtures("cpu_system")

A, B = "org-a/relu", "org-b/relu"


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path: Path) -> dict[str, Path]:
    return isolate(monkeypatch, tmp_path)


@pytest.fixture()
def filled(env, tmp_path: Path) -> dict[str, list[str]]:
    """A cache holding A at two versions and B at one, each loaded as a user would (so
    metadata, listings and refs are cached beside the variants)."""
    hub = HfHub(api=FakeHfApi(tmp_path / "remote"), cache=env["cache"])
    commits: dict[str, list[str]] = {A: [], B: []}
    for repo, version in ((A, 1), (A, 2), (B, 1)):
        project = tmp_path / f"p-{repo.replace('/', '-')}-{version}"
        make_variant(project, module_id=uid("c"), value=version, version=version)
        commits[repo].append(hub.publish(repo, project, version=version).commit)
        loader.get_kernel(repo, version=version, hub=hub, trust_remote_code=[repo])
    return commits


def _listed(capsys) -> list[dict]:
    capsys.readouterr()
    assert main(["cache", "list", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _variant_bytes(root: Path, repo: str, commit: str) -> int:
    where = root / "variants" / repo / commit / "torch-cpu"
    return sum(p.stat().st_size for p in where.rglob("*") if p.is_file())


def test_list_shows_each_variant_with_its_size(env, filled, capsys) -> None:
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    for repo, commits in filled.items():
        for commit in commits:
            assert any(line.startswith(repo) and commit[:12] in line and "torch-cpu" in line
                       for line in out.splitlines()), out
    assert "3 variants, " in out and str(env["cache"]) in out
    listed = _listed(capsys)
    assert sorted((v["repo-id"], v["commit"]) for v in listed) == sorted(
        (r, c) for r, cs in filled.items() for c in cs)
    for v in listed:
        # the fields README.md names, in its order (a script reads them)
        assert list(v) == ["repo-id", "commit", "variant", "size", "fetched", "damaged",
                           "newer-format"], v
        assert v["size"] == _variant_bytes(env["cache"], v["repo-id"], v["commit"]) > 0
        assert abs(v["fetched"] - time.time()) < 600
        assert v["damaged"] is None and v["newer-format"] is None


def test_list_does_not_look_each_entry_up_again(env, monkeypatch) -> None:
    """``cache list`` describes each entry where it found it: looking every entry up
    again by its repository id lists the cache's and the organization's folders once per
    entry, which made listing a cache of thousands of variants slow."""
    from kernelforge.hub import base

    cache = DownloadCache(env["cache"])
    commits = [f"{i:040x}" for i in range(1, 4)]
    for repo in ("org/a", "org/b", "Org/C"):
        for commit in commits:
            for variant in ("torch-cpu", "torch-cuda"):
                cache.install(repo, commit, variant,
                              lambda d: (d / "metadata.json").write_text('{"id": "_a", '
                                                                         '"name": "a"}'),
                              lambda d: {})
    listed: list[object] = []
    spellings = base.spellings
    monkeypatch.setattr(cache_mod, "spellings",
                        lambda *a, **kw: listed.append(a) or spellings(*a, **kw))
    found = cache.variants()
    assert len(found) == 18 and not any(v.damaged for v in found)
    assert {v.repo_id for v in found} == {"org/a", "org/b", "Org/C"}
    assert all(v.size > 0 for v in found)
    assert listed == []


def test_an_empty_cache_says_so(env, capsys) -> None:
    assert main(["cache", "list"]) == 0
    assert "is empty" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert "already empty" in capsys.readouterr().out


def test_json_list_of_a_cache_never_made_is_an_empty_list(env, capsys) -> None:
    """``--json`` is for scripts: a cache whose directory does not exist yet lists as
    ``[]``, as an existing empty one does, not as the sentence meant for a person."""
    assert not env["cache"].exists()
    assert _listed(capsys) == []
    env["cache"].mkdir()
    assert _listed(capsys) == []


def test_remove_takes_one_repository_and_what_is_kept_for_it(env, filled, tmp_path,
                                                               capsys) -> None:
    root = env["cache"]
    assert main(["cache", "remove", A]) == 0
    out = capsys.readouterr().out
    assert "removed 2 variants of org-a/relu" in out, out
    assert [v["repo-id"] for v in _listed(capsys)] == [B]
    for kind in ("variants", "files", "listings"):
        assert not (root / kind / A).exists()
        assert (root / kind / B).is_dir()
    assert not (root / "refs" / f"{A}.json").exists() and (root / "refs" / f"{B}.json").exists()
    assert not list((root / "tmp").iterdir())  # nothing left half-removed
    # A load fetches it again. (The in-process cache of calls goes first: a hub made
    # anew may get the freed id of the fixture's client and so the same key.)
    loader._by_call.clear()
    hub = HfHub(api=FakeHfApi(tmp_path / "remote"), cache=root)
    assert loader.get_kernel(A, version=2, hub=hub, trust_remote_code=[A]).VALUE == 2
    assert main(["cache", "remove", A]) == 0


def test_remove_one_revision_by_its_first_digits(env, filled, capsys) -> None:
    old, new = filled[A]
    assert main(["cache", "remove", A, "--revision", old[:7].upper()]) == 0
    assert old[:12] in capsys.readouterr().out
    assert sorted(v["commit"] for v in _listed(capsys)) == sorted([new, filled[B][0]])
    assert not (env["cache"] / "files" / A / old).exists()
    assert (env["cache"] / "files" / A / new).is_dir()
    assert main(["cache", "remove", A, "--revision", old[:7]]) == 1
    assert "no cached revision starts with" in capsys.readouterr().err, "the revision is gone"


def test_remove_one_variant(env, filled, capsys) -> None:
    assert main(["cache", "remove", B, "--variant", "torch-cuda"]) == 1
    assert "nothing of org-b/relu, variant torch-cuda" in capsys.readouterr().err
    assert main(["cache", "remove", B, "--variant", "torch-cpu"]) == 0
    assert sorted(v["repo-id"] for v in _listed(capsys)) == [A, A]
    assert (env["cache"] / "files" / B).is_dir()  # only the variant went


@pytest.mark.parametrize("variant", ["", " "], ids=["empty", "blank"])
def test_remove_refuses_an_empty_variant_naming_the_option(env, filled, capsys,
                                                            variant: str) -> None:
    """An empty --variant (an unset variable) names no variant: it removed nothing and
    said nothing of the repository was cached, leaving the variant out of the message.
    It is a usage error naming the option, and the library refuses it too."""
    listed = _listed(capsys)
    with pytest.raises(SystemExit) as info:
        main(["cache", "remove", B, "--variant", variant])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "usage: kernelforge cache remove" in err
    assert (f"argument --variant: {variant!r}: an empty name is not a variant (it would "
            "match no cached variant); pass a variant's name as 'kernelforge cache list' "
            "shows it, or leave --variant out for every variant") in err, err
    with pytest.raises(ValueError, match=r"^variant: an empty name is not a variant"):
        DownloadCache(env["cache"]).remove(B, variant=variant)
    assert _listed(capsys) == listed


def test_clear_older_than_keeps_what_was_fetched_since(env, filled, capsys,
                                                       monkeypatch) -> None:
    first = DownloadCache(env["cache"]).variants()[0]
    entry = env["cache"] / "variants" / first.repo_id / first.commit / first.variant
    doc = json.loads((entry / "entry.json").read_text())
    doc["time"] -= 40 * 86400
    os.chmod(entry, 0o755)
    (entry / "entry.json").write_text(json.dumps(doc))
    assert main(["cache", "clear", "--older-than", "30"]) == 0
    assert "removed 1 variant fetched more than 30 days ago" in capsys.readouterr().out
    assert len(_listed(capsys)) == 2
    monkeypatch.setattr(cache_mod.time, "time", lambda: doc["time"] + 80 * 86400)
    assert main(["cache", "clear", "--older-than", "30"]) == 0
    assert _listed(capsys) == []
    assert (env["cache"] / "files" / A).is_dir()  # the small files stay


def _age(entry: Path, days: float) -> None:
    """Set the modification time of an entry's folder and of everything in it ``days``
    back, as if nothing had written it since."""
    when = time.time() - days * 86400
    for path in [entry, *entry.rglob("*")]:
        os.utime(path, (when, when), follow_symlinks=False)


@pytest.mark.parametrize("when", [float("nan"), float("inf"), 1e300, True],
                         ids=["nan", "inf", "1e300", "bool"])
def test_an_entry_time_no_date_can_be_given_for_counts_as_unrecorded(env, filled, capsys,
                                                                     when) -> None:
    """An entry.json whose time is no date (edited by hand, or damaged still as JSON) is
    listed without one, as an entry that records none, and ``--older-than`` dates it as
    it dates those, by its files' modification time: kept while that is recent, removed
    once it is old. Before, ``cache list`` stopped with a traceback on NaN
    (``time.localtime``) and wrote ``NaN``, which is no JSON, with ``--json``."""
    first = DownloadCache(env["cache"]).variants()[0]
    entry = env["cache"] / "variants" / first.repo_id / first.commit / first.variant
    record = entry / "entry.json"
    _rewrite(record, json.dumps({**json.loads(record.read_text()), "time": when}).encode())
    capsys.readouterr()
    assert main(["cache", "list"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if first.commit[:12] in line)
    assert row.rstrip().endswith("-"), row
    fetched = {v["commit"]: v["fetched"] for v in _listed(capsys)}
    assert fetched[first.commit] is None
    capsys.readouterr()
    assert main(["cache", "clear", "--older-than", "30"]) == 0
    out = capsys.readouterr().out
    assert "removed 0 variants" in out and "kept 1 variant whose entry records no " in out
    assert "a load online fetches" not in out, out  # not damaged: a load uses it as it is
    _age(entry, 40)
    assert main(["cache", "clear", "--older-than", "30"]) == 0
    out = capsys.readouterr().out
    assert "removed 1 variant fetched more than 30 days ago" in out, out
    assert "(no fetch time recorded; files last modified " in out, out
    assert first.commit not in {v["commit"] for v in _listed(capsys)}


def test_clear_empties_the_cache_but_not_a_download_in_progress(env, filled,
                                                                capsys) -> None:
    root = env["cache"]
    interrupted = root / "tmp" / f"{'a' * 32}.dead01"
    running = root / "tmp" / f"{'b' * 32}.beef02"
    for leftover in (interrupted, running):
        leftover.mkdir(parents=True)
        (leftover / "part").write_bytes(b"x" * 1000)
    with filelock.FileLock(str(root / "locks" / f"{'b' * 32}.lock")):
        assert main(["cache", "clear"]) == 0
    out = capsys.readouterr().out
    assert "removed 3 variants and every other cached file" in out
    assert sorted(p.name for p in root.iterdir()) == ["CACHEDIR.TAG", "locks", "tmp"]
    assert [p.name for p in (root / "tmp").iterdir()] == [running.name]


def test_a_directory_that_is_not_a_cache_is_left_alone(env, filled, tmp_path,
                                                       capsys) -> None:
    home = tmp_path / "home"
    (home / "files").mkdir(parents=True)
    (home / "notes.txt").write_text("mine")
    (home / "files" / "thesis.tex").write_text("mine too")
    assert main(["cache", "clear", "--cache", str(home)]) == 1
    err = capsys.readouterr().err
    assert "does not look like a kernelforge download cache" in err, err
    assert "notes.txt" in err and "refusing to remove anything" in err
    assert (home / "files" / "thesis.tex").read_text() == "mine too"
    with pytest.raises(SystemExit) as info:
        main(["cache", "clear", "--cache", ""])
    assert info.value.code == 2
    assert len(_listed(capsys)) == 3


@pytest.mark.parametrize("argv,problem", [
    (["cache", "remove", "not-a-repo"], "org/name"),
    (["cache", "remove", A, "--revision", "xyz"], "is not a commit id"),
    (["cache", "remove", A, "--revision", ""], "argument --revision: '' is not a commit id"),
    (["cache", "clear", "--older-than", "-1"], "is not a number of days"),
    (["cache", "clear", "--older-than", "nan"], "is not a number of days"),
])
def test_bad_arguments_are_usage_errors(argv, problem, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert problem in capsys.readouterr().err


def test_a_folder_with_only_cache_like_names_is_not_taken_for_a_cache(tmp_path, capsys) -> None:
    project = tmp_path / "project"
    (project / "files").mkdir(parents=True)
    (project / "tmp").mkdir()
    (project / "files" / "thesis.tex").write_text("mine")
    assert main(["cache", "clear", "--cache", str(project)]) == 1
    assert "thesis.tex" in capsys.readouterr().err
    assert (project / "files" / "thesis.tex").read_text() == "mine"
    assert not (project / "CACHEDIR.TAG").exists()


def test_an_untagged_cache_with_the_layout_is_cleared(env, filled, capsys) -> None:
    """Caches written before the tag existed, or in a directory the cache did not make,
    are recognised by their layout (and stay untagged: only a root the cache makes is)."""
    assert (env["cache"] / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28")
    (env["cache"] / "CACHEDIR.TAG").unlink()
    assert main(["cache", "clear"]) == 0
    assert "removed 3 variants" in capsys.readouterr().out
    assert not (env["cache"] / "CACHEDIR.TAG").exists()


def test_stray_folders_in_a_cache_do_not_stop_list_or_clear(env, filled, capsys) -> None:
    root = env["cache"]
    stray = root / "variants" / "org-a" / "relu" / "not-a-commit" / "torch-cpu"
    stray.mkdir(parents=True)
    (stray / "entry.json").write_text("{}")
    (root / "variants" / "README").write_text("a note")
    assert len(_listed(capsys)) == 3
    assert main(["cache", "clear"]) == 0
    assert "removed 3 variants" in capsys.readouterr().out
    assert not (root / "variants").exists()


def test_clear_never_changes_modes_through_a_link(env, filled, tmp_path) -> None:
    private = tmp_path / "private"
    private.mkdir()
    private.chmod(0o700)
    (private / "secret").write_text("s")
    os.symlink(private, env["cache"] / "files" / "org-a" / "relu" / "link")
    assert main(["cache", "clear"]) == 0
    assert (private / "secret").read_text() == "s"
    assert (private.stat().st_mode & 0o777) == 0o700


def test_refs_of_names_that_differ_by_a_suffix_stay_apart(env) -> None:
    cache = DownloadCache(env["cache"])
    cache.save_refs("org/relu", {"v1": "a" * 40}, {})
    cache.save_refs("org/relu.v2", {"v1": "b" * 40}, {})
    assert cache.load_refs("org/relu") == ({"v1": "a" * 40}, {})
    assert cache.load_refs("org/relu.v2") == ({"v1": "b" * 40}, {})
    cache.remove("org/relu.v2")
    assert cache.load_refs("org/relu") == ({"v1": "a" * 40}, {})


def test_a_refs_file_naming_no_repository_is_not_read(env) -> None:
    """Refs files of earlier versions name no repository, and those versions wrote
    ``org/relu.v2``'s refs to ``org/relu.json``: such a file is not taken for anyone's."""
    cache = DownloadCache(env["cache"])
    cache.save_refs("org/relu", {"v1": "a" * 40}, {})
    path = env["cache"] / "refs" / "org" / "relu.json"
    doc = json.loads(path.read_text())
    del doc["repo-id"]
    path.write_text(json.dumps(doc))
    assert cache.load_refs("org/relu") is None
    cache.save_refs("org/relu", {"v1": "c" * 40}, {})  # the next online load
    assert cache.load_refs("org/relu") == ({"v1": "c" * 40}, {})


@pytest.mark.parametrize("change", [
    {"branches": 5},
    {"branches": ["v1"]},
    {"branches": {"v1": 5}},
    {"tags": {"t": "not-a-commit"}},
])
def test_a_damaged_refs_file_is_ignored_with_a_warning(env, caplog, change) -> None:
    """Refs of the wrong shape count as none cached (an offline load says so, an online
    one writes them again), rather than failing deep in the version choice."""
    cache = DownloadCache(env["cache"])
    cache.save_refs("org/relu", {"v1": "a" * 40}, {})
    path = env["cache"] / "refs" / "org" / "relu.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with caplog.at_level(logging.WARNING, logger="kernelforge"):
        assert cache.load_refs("org/relu") is None
    assert f"ignoring damaged cache file {path} (" in caplog.text
    assert "is not a mapping of names to commit ids" in caplog.text
    cache.save_refs("org/relu", {"v1": "c" * 40}, {})  # the next online load
    assert cache.load_refs("org/relu") == ({"v1": "c" * 40}, {})


@pytest.mark.parametrize("when", [10**400, 1e300, float("nan"), float("inf")],
                         ids=["huge-int", "1e300", "nan", "inf"])
def test_a_refs_time_no_date_can_be_given_for_is_none(env, when) -> None:
    cache = DownloadCache(env["cache"])
    cache.save_refs("org/relu", {"v1": "a" * 40}, {})
    path = env["cache"] / "refs" / "org" / "relu.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "time": when}))
    assert cache.refs_saved_at("org/relu") is None
    assert cache.load_refs("org/relu") == ({"v1": "a" * 40}, {})


def test_a_download_finishing_during_clear_is_reported_or_kept(env, monkeypatch) -> None:
    cache = DownloadCache(env["cache"])

    def fill(d: Path) -> None:
        (d / "x.py").write_text("X = 1\n")

    cache.install("org/a", "1" * 40, "torch-cpu", fill, lambda d: {})
    real = DownloadCache._discard_entry

    def racing(self, repo_id, commit, variant, *args):
        if repo_id == "org/a":  # another process completes a download right now
            cache.install("org/b", "2" * 40, "torch-cpu", fill, lambda d: {})
        return real(self, repo_id, commit, variant, *args)

    monkeypatch.setattr(DownloadCache, "_discard_entry", racing)
    removed = cache.remove()
    reported = {(v.repo_id, v.commit) for v in removed.variants}
    assert ("org/a", "1" * 40) in reported
    for repo, commit in (("org/a", "1" * 40), ("org/b", "2" * 40)):
        still = cache.entry(repo, commit, "torch-cpu") is not None
        assert still != ((repo, commit) in reported), (repo, still, reported)


@pytest.mark.parametrize("n,text", [(999, "999 B"), (1000, "1.0 kB"), (999_949, "999.9 kB"),
                                    (999_950, "1.0 MB"), (3_100_000, "3.1 MB")])
def test_sizes_are_written_in_decimal_units(n, text) -> None:
    from kernelforge.cli_share import _size_text

    assert _size_text(n) == text


@pytest.mark.parametrize("action", [["list"], ["clear"], ["remove", "org/relu"]])
def test_a_cache_path_that_is_a_file_is_an_error(tmp_path, capsys, action) -> None:
    path = tmp_path / "not-a-dir"
    path.write_text("x")
    assert main(["cache", *action, "--cache", str(path)]) == 1
    assert "is a file, not a download cache directory" in capsys.readouterr().err
    assert path.read_text() == "x"


def test_a_locked_kernel_whose_cache_entry_lost_its_metadata_is_fetched_again(
    env, tmp_path: Path, monkeypatch, capsys, caplog
) -> None:
    """The walkthrough's case: after an interrupted removal by hand left an entry without
    files/metadata.json, download and locked loads fetch it again online; offline,
    load_kernel names the damaged entry and the commands that replace it, which work."""
    from kernelforge.lock import download_locked, lock_project

    api = FakeHfApi(tmp_path / "remote")
    hub = HfHub(api=api, cache=env["cache"])
    module_id = uid("dmg")
    make_variant(tmp_path / "p", module_id=module_id)
    commit = hub.publish(A, tmp_path / "p", version=1).commit
    project = tmp_path / "app"
    project.mkdir()
    (project / "pyproject.toml").write_text(f'[tool.kernelforge.dependencies]\n"{A}" = 1\n')
    lock = lock_project(project, hub=hub, allow=True).path
    [(_repo, _variant, files)] = download_locked(lock, hub=hub)

    def damage() -> None:
        files.chmod(0o755)
        (files / "metadata.json").chmod(0o644)
        (files / "metadata.json").unlink()

    damage()
    with pytest.raises(Exception) as info:  # offline: named, with the fix
        loader.load_kernel(A, lockfile=lock, hub=hub)
    said = str(info.value)
    assert "is damaged" in said and f"cache remove {A} --revision {commit[:12]}" in said, said
    assert "load_kernel never downloads" in said, said
    # the commands it names replace the entry
    assert main(["cache", "remove", A, "--revision", commit[:12]]) == 0
    assert hub.cache.entry(A, commit, "torch-cpu") is None
    [(_repo, _variant, files)] = download_locked(lock, hub=hub)
    assert loader.load_kernel(A, lockfile=lock, hub=hub).__name__ == module_id
    # online, a download and a locked load fetch a damaged entry again themselves
    damage()
    before = len(api.fetches())
    with caplog.at_level("WARNING", logger="kernelforge"):
        [(_repo, _variant, files)] = download_locked(lock, hub=hub)
    assert len(api.fetches()) > before and "fetching it again" in caplog.text
    damage()
    loader._by_call.clear()
    assert loader.get_locked_kernel(A, lockfile=lock, hub=hub).__name__ == module_id
    assert (files / "metadata.json").is_file()


def test_a_cache_of_no_variants_shows_no_table_header(env, filled, capsys) -> None:
    for repo in filled:
        assert main(["cache", "remove", repo, "--variant", "torch-cpu"]) == 0
    capsys.readouterr()
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert "REPOSITORY" not in out and out.startswith("0 variants, "), out


def _unlink_metadata(entry: Path) -> None:
    (entry / "files" / "metadata.json").unlink()


def _rewrite(path: Path, data: bytes) -> None:
    path.chmod(0o644)
    path.write_bytes(data)


# each damage the README's "Damaged copies" says `cache list` marks
DAMAGES = [
    ("metadata-gone", _unlink_metadata, "its files/metadata.json is missing"),
    ("files-gone", lambda e: shutil.rmtree(e / "files"), "its files/ directory is missing"),
    ("metadata-unparsable", lambda e: _rewrite(e / "files" / "metadata.json", b"{trunc"),
     "its files/metadata.json"),
    ("entry-json-unparsable", lambda e: _rewrite(e / "entry.json", b"{trunc"),
     "its entry.json is not valid JSON"),
    ("entry-json-without-files", lambda e: _rewrite(e / "entry.json", b'{"format": 1}'),
     "its entry.json records no files"),
]


@pytest.mark.parametrize(("damage", "said"), [d[1:] for d in DAMAGES],
                         ids=[d[0] for d in DAMAGES])
def test_list_marks_a_damaged_entry(env, filled, capsys, damage, said) -> None:
    commit = filled[B][0]
    damage(env["cache"] / "variants" / B / commit / "torch-cpu")
    capsys.readouterr()
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert f"damaged: {B} {commit[:12]} torch-cpu: {said}" in out, out
    assert "a load online fetches it again" in out, out
    listed = {(v["repo-id"], v["commit"]): v["damaged"] for v in _listed(capsys)}
    assert listed[(B, commit)].startswith(said)
    assert all(d is None for key, d in listed.items() if key != (B, commit))


# each way an entry.json can fail to give a fetch time a removal by age could read
UNDATED = [
    ("not-json", b"{trunc", "its entry.json is not valid JSON"),
    ("empty", b"", "its entry.json is not valid JSON"),
    ("cut-short", None, "its entry.json is not valid JSON"),  # the first half of the file
    ("records-no-files", b'{"format": 1, "time": 1}', "its entry.json records no files"),
]


@pytest.mark.parametrize(("data", "said"), [u[1:] for u in UNDATED],
                         ids=[u[0] for u in UNDATED])
def test_clear_older_than_dates_a_damaged_entry_by_its_files(env, filled, capsys, data,
                                                             said) -> None:
    """An entry whose entry.json cannot be read was removed by ``--older-than`` as if it
    were old, even one written a minute before (by another program writing into the
    cache, or left so by a crash). It is dated by the newest modification time of its
    folder and files instead: kept while that is recent, saying so and how to remove it
    now, and removed once it is old, saying by what it was dated."""
    root = env["cache"]
    commit = filled[B][0]
    entry = root / "variants" / B / commit / "torch-cpu"
    record = entry / "entry.json"
    damaged = data if data is not None else record.read_bytes()[:40]
    _rewrite(record, damaged)
    _age(entry / "files", 40)  # only the entry.json is new: the newest time counts
    capsys.readouterr()
    assert main(["cache", "clear", "--older-than", "30"]) == 0
    out = capsys.readouterr().out
    assert record.read_bytes() == damaged and (entry / "files" / "metadata.json").is_file()
    assert "removed 0 variants fetched more than 30 days ago" in out, out
    assert ("kept 1 variant whose entry records no fetch time, dated instead by its "
            "files' last modification, less than 30 days ago (another program may be "
            "writing it now):") in out, out
    kept_line = next(line for line in out.splitlines() if commit[:12] in line
                     and line.startswith("  "))
    assert f"  {B}  {commit[:12]}  torch-cpu  " in kept_line, out
    assert "(no fetch time recorded; files last modified " in kept_line, kept_line
    assert f"damaged: {said}" in kept_line, kept_line
    assert (f"to remove it now, name it: 'kernelforge cache remove {B} --revision "
            f"{commit[:12]}' (a load online fetches a damaged entry again)") in out, out
    assert len(_listed(capsys)) == 3  # nothing else went either

    # the API reports it as kept, with the time it was dated by
    removed = DownloadCache(root).remove(older_than=30 * 86400)
    assert removed.variants == []
    [kept] = removed.kept
    assert (kept.repo_id, kept.commit, kept.fetched, kept.newer_format) == (B, commit,
                                                                          None, None)
    assert kept.damaged is not None and kept.damaged.startswith(said)
    assert kept.modified is not None and abs(kept.modified - time.time()) < 600

    _age(entry, 40)  # untouched since: now it is old
    assert main(["cache", "clear", "--older-than", "30"]) == 0
    out = capsys.readouterr().out
    assert "removed 1 variant fetched more than 30 days ago" in out, out
    assert "(no fetch time recorded; files last modified " in out and said in out, out
    assert "kept" not in out, out
    assert not entry.exists()
    assert sorted(v["commit"] for v in _listed(capsys)) == sorted(filled[A])
