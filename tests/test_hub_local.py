"""The embedded local hub (kernelforge.hub.local): publish, list, resolve, crash safety."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kf_testutil import write_metadata

from kernelforge import _durable, digest
from kernelforge.errors import HubError, IntegrityError
from kernelforge.hub import LocalHub, Revision, as_hub, default_root, validate_repo_id

pytestmark = pytest.mark.usefixtures("cpu_system")

pytest.importorskip("kernelforge.variants")

REPO = "kernels-test/relu"
OTHER_REPO = "kernels-test/other"


def make_variant(
    project: Path,
    variant: str,
    *,
    module_id: str = "_relu_cpu_0000001",
    value: int = 1,
    version: int | None = 1,
    with_digest: bool = True,
    extra: dict[str, bytes] | None = None,
) -> Path:
    """Fabricate ``project/build/<variant>/``: a tiny pure-Python kernel package."""
    vdir = project / "build" / variant
    vdir.mkdir(parents=True)
    (vdir / "__init__.py").write_text(f"from . import helper\nVALUE = {value}\n")
    (vdir / "helper.py").write_text("def double(x):\n    return 2 * x\n")
    for rel, data in (extra or {}).items():
        (vdir / rel).parent.mkdir(parents=True, exist_ok=True)
        (vdir / rel).write_bytes(data)
    write_metadata(vdir, module_id, version=version, with_digest=with_digest)
    return vdir


@pytest.fixture
def hub(tmp_path: Path) -> LocalHub:
    return LocalHub(tmp_path / "hub")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "relu"
    make_variant(root, "torch-cpu")
    return root


# --- roots and ids ---------------------------------------------------------------------


def test_default_root_reads_the_environment_at_call_time(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KERNELFORGE_HUB", str(tmp_path / "envhub"))
    assert default_root() == tmp_path / "envhub"
    assert LocalHub().root == tmp_path / "envhub"
    assert as_hub(None).root == tmp_path / "envhub"
    monkeypatch.delenv("KERNELFORGE_HUB")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_root() == tmp_path / "cache" / "kernelforge" / "hub"
    assert LocalHub(tmp_path / "x").root == tmp_path / "x"
    assert as_hub(str(tmp_path / "y")).root == tmp_path / "y"


@pytest.mark.parametrize("blank", ["", "   "])
def test_an_empty_hub_path_is_refused_and_an_empty_environment_is_unset(
        blank: str, monkeypatch, tmp_path: Path) -> None:
    """An empty path would be the current directory (``--hub "$UNSET"``): refused as an
    argument; an empty (or blank) $KERNELFORGE_HUB counts as unset, as in most tools."""
    for make in (LocalHub, as_hub):
        with pytest.raises(ValueError, match="hub: an empty path is not a hub .*current "
                                             r"directory.*pass a hub directory \('\.' for "
                                             r"the current directory\), 'hf'"):
            make(blank)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("KERNELFORGE_HUB", blank)
    assert default_root() == tmp_path / "cache" / "kernelforge" / "hub"
    assert as_hub(None).root == LocalHub().root == default_root()
    # and a load with no hub falls back to the Hugging Face Hub for a repository the
    # local hub lacks, as with the variable unset
    from kernelforge.locate import hub_for

    assert hub_for(None, "kernels-test/absent").kind == "hf"


def test_a_hub_root_that_is_a_file_or_missing_is_named(project: Path, tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a hub\n")
    hub = LocalHub(afile)
    with pytest.raises(HubError, match=f"cannot write to the hub: {afile} is not a directory, "
                                       "so it cannot be a hub"):
        hub.publish(REPO, project, version=1)
    with pytest.raises(HubError, match=f"not found: {afile} is not a directory"):
        hub.branches(REPO)
    assert afile.read_text() == "not a hub\n"
    missing = LocalHub(tmp_path / "nowhere")
    with pytest.raises(HubError, match=f"the hub directory {tmp_path / 'nowhere'} does not "
                                       "exist; check the path"):
        missing.branches(REPO)


def test_a_hub_that_cannot_be_written_is_a_hub_error(hub: LocalHub, project: Path,
                                                     monkeypatch) -> None:
    """No space, no permission: a HubError naming the hub (the CLI's exit 1), not an
    OSError traceback."""
    import errno

    def full(src: Path, dst: Path) -> str:  # creating the copy in the hub fails
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(_durable, "copy_file", full)
    with pytest.raises(HubError, match=f"writing to the hub {hub.root} failed \\(No space "
                                       f"left on device: {hub.root}/kernels-test/relu/tmp/"):
        hub.publish(REPO, project, version=1)

    def full_midway(src: Path, dst: Path) -> str:  # a write error names no file
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_durable, "copy_file", full_midway)
    with pytest.raises(HubError, match=f"writing to the hub {hub.root} failed \\(No space "
                                       "left on device\\)"):
        hub.publish(REPO, project, version=1)


@pytest.mark.parametrize("code, fix", [
    (28, "free space on its disk"),  # ENOSPC
    (13, "make {hub} writable, or publish to a hub you can write (--hub on the command "
         "line, hub= in Python)"),  # EACCES
])
def test_a_hub_that_cannot_be_written_says_how_to_fix_it(hub: LocalHub, project: Path,
                                                         tmp_path: Path, monkeypatch,
                                                         code: int, fix: str) -> None:
    """The error says what is left (nothing of the refused revision) and what to do,
    not only the system's reason."""
    first = hub.publish(REPO, project, version=1)

    def refused(src: Path, dst: Path) -> str:
        raise OSError(code, os.strerror(code), str(dst))

    monkeypatch.setattr(_durable, "copy_file", refused)
    with pytest.raises(HubError) as info:
        hub.publish(REPO, _second_build(tmp_path), version=1)
    assert re.fullmatch(
        re.escape(f"writing to the hub {hub.root} failed ({os.strerror(code)}: {hub.root}/")
        + r"\S+" + re.escape(f"); its revisions are as they were; fix: "
                             f"{fix.format(hub=hub.root)}"), str(info.value)), info.value
    assert hub.branches(REPO) == {"v1": first.commit}


@pytest.mark.parametrize("trouble", ["unreadable", "removed"])
def test_an_unreadable_build_file_is_the_builds_problem_not_the_hubs(
        hub: LocalHub, project: Path, monkeypatch, trouble: str) -> None:
    """A build file that cannot be read (no permission; removed during the publish) is
    named as the build's file, not reported as a failure to write the hub."""
    import errno

    real = _durable.copy_file
    helper = project / "build" / "torch-cpu" / "helper.py"

    def copy(src: Path, dst: Path) -> str:
        if src == helper:
            if trouble == "removed":
                src.unlink()
            else:  # root reads any file: fake the refusal a chmod 000 would give
                raise PermissionError(errno.EACCES, "Permission denied", str(src))
        return real(src, dst)

    monkeypatch.setattr(_durable, "copy_file", copy)
    why = "Permission denied" if trouble == "unreadable" else "No such file or directory"
    with pytest.raises(HubError) as info:
        hub.publish(REPO, project, version=1)
    assert str(info.value) == (
        f"{helper}: cannot read this file of the build being published ({why}); nothing "
        "was published. Make it readable, or rebuild (kernelforge build), then publish again")
    assert "writing to the hub" not in str(info.value)
    assert not (hub.root / "kernels-test").exists()  # a first publish: no folder left


def test_a_file_outside_the_hub_is_not_blamed_on_the_hub(hub: LocalHub, project: Path,
                                                         monkeypatch, tmp_path: Path) -> None:
    """An OSError about a path outside the hub that the publish did not expect still
    names that path, without saying the hub could not be written."""
    import errno

    def odd(*args: object, **kwargs: object) -> str:
        raise OSError(errno.EIO, "Input/output error", str(tmp_path / "elsewhere"))

    monkeypatch.setattr(_durable, "copy_file", odd)
    with pytest.raises(HubError) as info:
        hub.publish(REPO, project, version=1)
    assert str(info.value) == (f"{tmp_path / 'elsewhere'}: Input/output error (a file "
                               f"outside the hub {hub.root}; no revision was written)")


@pytest.mark.parametrize(
    "repo_id",
    ["", "relu", "a/b/c", "../x", "a/..", "a/b c", "-a/b", "a/b-", "a/.b", "a//b", None],
)
def test_bad_repo_ids_name_the_argument(hub: LocalHub, project: Path, repo_id) -> None:
    with pytest.raises(ValueError, match="repo_id"):
        validate_repo_id(repo_id)
    with pytest.raises(ValueError, match="repo_id"):
        hub.publish(repo_id, project, version=1)


def test_good_repo_ids() -> None:
    assert validate_repo_id("kernels-community/gemm") == ("kernels-community", "gemm")
    assert validate_repo_id("A1/flash_attn.v2") == ("A1", "flash_attn.v2")


# --- publishing and listing --------------------------------------------------------------


def test_publish_and_list(hub: LocalHub, project: Path, tmp_path: Path) -> None:
    rev = hub.publish(REPO, project, version=1, message="first")
    assert isinstance(rev, Revision)
    assert re.fullmatch(r"[0-9a-f]{40}", rev.commit) and rev.short == rev.commit[:7]
    assert (rev.branch, rev.parent, rev.message) == ("v1", None, "first")
    assert rev.variants == ("torch-cpu",)
    assert hub.repos() == [REPO]
    assert hub.branches(REPO) == {"v1": rev.commit}
    assert hub.versions(REPO) == {1: rev.commit}
    assert hub.variants(REPO, rev.commit) == ["torch-cpu"]
    vdir = hub.variant_path(REPO, rev.commit, "torch-cpu")
    objects = hub.root / "kernels-test" / "relu" / "objects"
    assert vdir == objects / rev.commit / "build" / "torch-cpu"
    assert (vdir / "helper.py").read_text().startswith("def double")
    assert (vdir / "helper.py").stat().st_mode & 0o777 == 0o444
    hub.verify(REPO, rev.commit)

    other = tmp_path / "relu2"
    make_variant(other, "torch-cpu", module_id="_relu_cpu_0000002", value=2)
    make_variant(other, "torch-universal", module_id="_relu_universal_0000002", value=2)
    rev2 = hub.publish(REPO, other / "build", version=1, message="second")
    assert rev2.parent == rev.commit and rev2.commit != rev.commit
    assert [r.commit for r in hub.log(REPO, "v1")] == [rev2.commit, rev.commit]
    assert hub.variants(REPO, rev2.commit) == ["torch-cpu", "torch-universal"]
    assert hub.revision(REPO, rev.commit).variants == ("torch-cpu",)  # old revision intact

    make_variant(tmp_path / "relu3", "torch-cpu", module_id="_relu_cpu_0000003", version=2)
    rev3 = hub.publish(REPO, tmp_path / "relu3", version=2)
    assert hub.versions(REPO) == {1: rev2.commit, 2: rev3.commit}
    assert rev3.parent is None
    assert rev3.when.year >= 2024


def test_repository_ids_ignore_case(hub: LocalHub, project: Path, tmp_path: Path) -> None:
    """As on the Hugging Face Hub, ``Org/Name`` names the repository first published as
    ``org/name``, on any file system: publishes join it, and reads find it."""
    rev = hub.publish(REPO, project, version=1)
    loud = REPO.upper()
    assert hub.stored_id(loud) == REPO and hub.has_repo(loud)
    assert hub.branches(loud) == {"v1": rev.commit}
    assert hub.resolve("Kernels-Test/Relu", "v1") == rev.commit
    assert hub.owned(loud, rev.commit)  # the owner mark holds whatever the spelling
    make_variant(tmp_path / "p2", "torch-cpu", module_id="_relu_cpu_0000002", value=2)
    rev2 = hub.publish("Kernels-Test/RELU", tmp_path / "p2", version=1)
    assert rev2.parent == rev.commit and rev2.repo_id == REPO
    assert hub.repos() == [REPO]
    assert json.loads((hub.root / REPO / "objects" / rev2.commit / ".commit.json")
                      .read_text())["repo-id"] == REPO
    assert hub.owned(REPO, rev2.commit)
    record = hub.root / REPO / "objects" / rev2.commit / ".commit.json"
    doc = json.loads(record.read_text())
    del doc["repo-id"]  # a record naming no repository: the stored id is the mark's
    record.chmod(0o644)
    record.write_text(json.dumps(doc))
    assert hub.owned(loud, rev2.commit)
    # A new repository joins its organization's folder as first spelled.
    gelu = hub.publish("KERNELS-TEST/gelu", project, version=1)
    assert gelu.repo_id == "kernels-test/gelu"
    assert hub.repos() == ["kernels-test/gelu", REPO]
    assert not hub.has_repo("kernels-test/relu2")


def test_only_folders_that_name_a_loadable_repository_are_listed(hub: LocalHub,
                                                                  project: Path) -> None:
    """A folder pair that no load could name (``..`` inside it, a name ending in ``.``) is
    not offered as a repository of the hub, in ``repos()`` or a load's "did you mean"."""
    hub.publish(REPO, project, version=1)
    for stray in ("kernels..test/relu", "kernels-test/relu.", "kernels-test/re..lu"):
        (hub.root / stray / "refs").mkdir(parents=True)
    assert hub.repos() == [REPO]
    with pytest.raises(HubError) as info:
        hub.branches("kernels-test/relux")
    assert "'kernels-test/relu'" in str(info.value) and ".." not in str(info.value)


def test_a_repository_kept_under_two_spellings_is_named(hub: LocalHub, project: Path) -> None:
    """A hub written before ids ignored case may hold both on a case-sensitive file
    system: every use of the id says so rather than picking one."""
    hub.publish(REPO, project, version=1)
    twin = hub.root / "kernels-test" / "Relu"
    try:
        shutil.copytree(hub.root / REPO, twin)
    except FileExistsError:
        pytest.skip("the file system ignores case: two spellings cannot coexist")
    if not (hub.root / REPO).samefile(hub.root / REPO) or twin.samefile(hub.root / REPO):
        pytest.skip("the file system ignores case")
    for repo_id in (REPO, "kernels-test/Relu", "KERNELS-TEST/RELU"):
        with pytest.raises(HubError, match=r"holds it under 2 spellings .*keep one"):
            hub.branches(repo_id)
    with pytest.raises(HubError, match="2 spellings"):
        hub.publish(REPO, project, version=1)
    shutil.rmtree(twin / "refs")  # a folder without refs is no repository
    assert hub.stored_id("kernels-test/Relu") == REPO and hub.has_repo("kernels-test/RELU")


def test_first_publishes_under_two_spellings_make_one_repository(
    hub: LocalHub, project: Path, tmp_path: Path, monkeypatch
) -> None:
    """Another publisher creates the repository under another spelling between this
    publish's look-up and its write: the new folder is made under a hub-wide lock that
    looks again, so both revisions land in one repository."""
    other = _second_build(tmp_path)
    real = LocalHub.stored_id
    raced: list[str] = []

    def racing(self: LocalHub, repo_id: str) -> str:
        found = real(self, repo_id)
        if not raced:
            raced.append("")  # the other publisher looks up only once
            raced[0] = LocalHub(self.root).publish("Kernels-Test/RELU", other,
                                                   version=1).commit
        return found

    monkeypatch.setattr(LocalHub, "stored_id", racing)
    rev = hub.publish(REPO, project, version=1)
    monkeypatch.setattr(LocalHub, "stored_id", real)
    assert hub.repos() == ["Kernels-Test/RELU"]
    assert rev.repo_id == "Kernels-Test/RELU" and rev.parent == raced[0]
    assert [r.commit for r in hub.log(REPO, "v1")] == [rev.commit, raced[0]]


def test_look_alike_and_linked_folders_are_no_second_spelling(hub: LocalHub,
                                                              project: Path) -> None:
    """Only ASCII case is ignored (Python lower-cases the Kelvin sign to 'k'), and a
    link to the repository's folder is the same repository, not a second spelling."""
    kelvin = hub.root / "\u212aernels-test" / "relu"
    (kelvin / "refs").mkdir(parents=True)
    hub.publish(REPO, project, version=1)
    assert hub.repos() == [REPO] and hub.stored_id(REPO) == REPO
    try:
        os.symlink(hub.root / "kernels-test", hub.root / "Kernels-Test")
    except FileExistsError:
        pytest.skip("the file system ignores case")
    assert hub.stored_id("KERNELS-TEST/Relu") == REPO
    assert hub.versions("Kernels-Test/relu") == hub.versions(REPO)


def test_publishing_the_same_build_again_makes_no_revision(hub: LocalHub, project: Path,
                                                           tmp_path: Path) -> None:
    """As on the Hugging Face Hub: the branch already holds these files, so the publish
    returns its head (its own parent: nothing new) whatever the message; a signature or a
    card more is a change."""
    rev = hub.publish(REPO, project, version=1, message="first")
    again = hub.publish(REPO, project, version=1, message="second")
    assert (again.commit, again.parent, again.message) == (rev.commit, rev.commit, "first")
    assert [r.commit for r in hub.log(REPO, "v1")] == [rev.commit]
    carded = hub.publish(REPO, project, version=1, card="# relu\n")
    assert carded.parent == rev.commit and carded.commit != rev.commit
    # without a card the branch keeps its own, so the same build is no change, as on
    # the Hugging Face Hub (whose publish replaces only build/)
    uncarded = hub.publish(REPO, project, version=1)
    assert (uncarded.commit, uncarded.parent) == (carded.commit, carded.commit)
    assert hub.read_file(REPO, uncarded.commit, "README.md") == b"# relu\n"
    recarded = hub.publish(REPO, project, version=1, card="# relu, v1\n")
    assert recarded.parent == carded.commit
    assert hub.read_file(REPO, recarded.commit, "README.md") == b"# relu, v1\n"
    carded = hub.publish(REPO, project, version=1, card="# relu\n")
    from kernelforge import signing

    key = signing.generate_key(tmp_path / "k.pem")
    signed = hub.publish(REPO, project, version=1, card="# relu\n", signer=key)
    assert signed.parent == carded.commit
    assert hub.publish(REPO, project, version=1, card="# relu\n", signer=key).commit == \
        signed.commit


def test_publishing_the_same_build_again_copies_nothing(hub: LocalHub, project: Path,
                                                       monkeypatch) -> None:
    """The build is compared with the head where it is, before anything is copied into
    the hub: copying (and fsyncing) every file of a large build only to remove the copy
    again made a publish that changes nothing slower than a real one. A changed file or
    card still makes a revision, and a build whose files no longer match its metadata is
    still refused."""
    rev = hub.publish(REPO, project, version=1)
    copied: list[Path] = []
    copy_file = _durable.copy_file
    monkeypatch.setattr(_durable, "copy_file",
                        lambda src, dst: copied.append(src) or copy_file(src, dst))
    again = hub.publish(REPO, project, version=1)
    assert (again.commit, again.parent, copied) == (rev.commit, rev.commit, [])
    assert not (hub.root / REPO / "tmp").exists() or not any(
        (hub.root / REPO / "tmp").iterdir())
    carded = hub.publish(REPO, project, version=1, card="# relu\n")
    assert carded.parent == rev.commit and copied
    copied.clear()
    helper = project / "build" / "torch-cpu" / "helper.py"
    helper.write_text("def double(x):\n    return 3 * x\n")
    with pytest.raises(IntegrityError, match="refusing to publish"):
        hub.publish(REPO, project, version=1)
    assert hub.log(REPO, "v1")[0].commit == carded.commit


def test_the_same_build_of_another_publisher_is_published_again(
    hub: LocalHub, project: Path, monkeypatch, tmp_path: Path
) -> None:
    """In a shared hub, a head with the same files that another user published (its
    owner mark is not this user's) gets a revision of this user's own, which loads as
    theirs."""
    rev = hub.publish(REPO, project, version=1)
    monkeypatch.setenv("KERNELFORGE_CONFIG", str(tmp_path / "someone-else"))
    assert not hub.owned(REPO, rev.commit)
    mine = hub.publish(REPO, project, version=1)
    assert mine.parent == rev.commit and mine.commit != rev.commit
    assert hub.owned(REPO, mine.commit)


def test_a_directory_that_is_no_hub_is_not_written(hub: LocalHub, project: Path) -> None:
    """A project directory given as the hub (a slip of --hub) holds files where a hub
    holds only <org>/<name>/ folders: the publish is refused and writes nothing there."""
    before = sorted(p.relative_to(project) for p in project.rglob("*"))
    with pytest.raises(HubError, match=r"is not a hub directory: it holds .*build"):
        LocalHub(project / "build").publish(REPO, project, version=1)
    (project / "notes.txt").write_text("x")
    with pytest.raises(HubError, match=r"is not a hub directory: it holds .*notes.txt"):
        LocalHub(project).publish(REPO, project, version=1)
    assert sorted(p.relative_to(project) for p in project.rglob("*")) == sorted(
        [*before, Path("notes.txt")])
    hub.root.mkdir()
    (hub.root / "notes.txt").write_text("x")  # a folder of other files: no project named
    with pytest.raises(HubError) as info:
        hub.publish(REPO, project, version=1)
    assert str(info.value) == (
        f"cannot write to the hub: {hub.root} is not a hub directory: it holds "
        f"{hub.root / 'notes.txt'}, and a hub holds only <org>/<name>/ folders; name an "
        "empty directory or an existing hub (hub= in Python, --hub on the command line, or "
        "$KERNELFORGE_HUB), or leave it out for the default")
    (hub.root / "notes.txt").unlink()
    (hub.root / ".DS_Store").write_text("")  # dot-entries are not the hub's concern
    hub.publish(REPO, project, version=1)


def test_a_project_given_as_the_hub_is_named_as_one(project: Path, tmp_path: Path) -> None:
    """`--hub my-relu` where `my-relu` is the project: the error says that the project is
    the command's PATH, for the project and for its build/ folder alike."""
    (project / "build.toml").write_text("")
    said = "the project is the PATH of 'kernelforge publish PATH --repo ORG/NAME', not the hub"
    for root, what in ((project, "a kernel project"),
                       (project / "build", "a kernel project's build/ folder")):
        with pytest.raises(HubError) as published:
            LocalHub(root).publish(REPO, project, version=1)
        with pytest.raises(HubError) as read:
            LocalHub(root).branches(REPO)
        for info in (published, read):
            assert f" ({what}: {said}), and a hub holds only" in str(info.value)
    (project / "build.toml").unlink()  # a build/ folder of no project: not named one
    with pytest.raises(HubError) as info:
        LocalHub(project / "build").branches(REPO)
    assert "kernel project" not in str(info.value)


def test_pycache_is_not_published(hub: LocalHub, project: Path) -> None:
    cache = project / "build" / "torch-cpu" / "__pycache__"
    cache.mkdir()
    (cache / "helper.cpython-311.pyc").write_bytes(b"\0")
    rev = hub.publish(REPO, project, version=1)
    assert not (hub.variant_path(REPO, rev.commit, "torch-cpu") / "__pycache__").exists()


def test_a_pycache_beside_the_variants_is_not_taken_for_one(hub: LocalHub,
                                                            project: Path) -> None:
    """``build/__pycache__`` (a variant imported by its top-level name) is an import cache,
    not a variant: publish skips it rather than refusing its name."""
    cache = project / "build" / "__pycache__"
    cache.mkdir()
    (cache / "torch_cpu.cpython-311.pyc").write_bytes(b"\0")
    rev = hub.publish(REPO, project, version=1)
    assert rev.variants == ("torch-cpu",)
    assert not any("__pycache__" in f for f in hub.recorded_files(REPO, rev.commit))


@pytest.mark.timeout(60)  # a FIFO taken for a file blocks the copy that reads it
def test_a_fifo_in_a_variant_is_refused(hub: LocalHub, project: Path) -> None:
    os.mkfifo(project / "build" / "torch-cpu" / "pipe")
    with pytest.raises(HubError, match="pipe: only regular files can be published"):
        hub.publish(REPO, project, version=1)
    assert hub.repos() == []


def test_a_variant_directory_that_is_a_link_is_refused(hub: LocalHub, project: Path,
                                                       tmp_path: Path) -> None:
    """A link in build/ leads outside the build: publish takes no variant through one."""
    elsewhere = tmp_path / "elsewhere"
    shutil.move(project / "build" / "torch-cpu", elsewhere)
    (project / "build" / "torch-cpu").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(HubError, match="torch-cpu: only variant directories belong in"):
        hub.publish(REPO, project, version=1)
    assert hub.repos() == []


def test_a_build_with_sha512_digests_publishes_and_is_checked(hub: LocalHub,
                                                             tmp_path: Path) -> None:
    """A digest block may use sha512 (the hub records sha256): publish checks the files
    against the sha512 digests, so a good build publishes and a changed one is refused."""
    vdir = make_variant(tmp_path / "p", "torch-cpu", with_digest=False)
    meta = json.loads((vdir / "metadata.json").read_text())
    meta["digest"] = digest.digest_block(vdir, algorithm="sha512")
    (vdir / "metadata.json").write_text(json.dumps(meta))
    rev = hub.publish(REPO, tmp_path / "p", version=1)
    assert "build/torch-cpu/helper.py" in hub.recorded_files(REPO, rev.commit)
    (vdir / "helper.py").write_text("tampered = True\n")
    with pytest.raises(IntegrityError, match="changed: helper.py"):
        hub.publish(OTHER_REPO, tmp_path / "p", version=1)
    assert not hub.has_repo(OTHER_REPO)


def test_card_goes_to_main(hub: LocalHub, project: Path) -> None:
    rev = hub.publish(REPO, project, version=1, card="# relu\n")
    main = hub.branches(REPO)["main"]
    assert (hub.commit_path(REPO, main) / "README.md").read_text() == "# relu\n"
    assert (hub.commit_path(REPO, rev.commit) / "README.md").read_text() == "# relu\n"
    assert hub.variants(REPO, main) == []
    assert hub.versions(REPO) == {1: rev.commit}  # main is not a version
    card = hub.set_card(REPO, "# relu v2\n")
    assert card.parent == main and hub.branches(REPO)["main"] == card.commit


def test_a_card_too_big_to_read_back_is_refused_at_publish(hub: LocalHub, project: Path,
                                                          tmp_path: Path,
                                                          monkeypatch) -> None:
    """A publish without a card keeps the branch's by reading it back, which refuses a
    file over SMALL_FILE_MAX: a card that size is refused when given, not dropped from
    the branch by the next publish."""
    from kernelforge.hub import base

    monkeypatch.setattr(base, "SMALL_FILE_MAX", 100)
    with pytest.raises(ValueError) as info:
        hub.publish(REPO, project, version=1, card="é" * 50 + "x")
    assert str(info.value) == (
        "card: 101 bytes, more than the 100 a hub reads of one file; fix: shorten "
        "it (link large images rather than embedding them)")
    assert not hub.has_repo(REPO)
    hub.publish(REPO, project, version=1, card="é" * 50)  # 100 bytes: taken, and kept
    make_variant(tmp_path / "p2", "torch-cpu", module_id="_relu_cpu_0000002")
    rev = hub.publish(REPO, tmp_path / "p2", version=1)
    assert hub.read_file(REPO, rev.commit, "README.md") == ("é" * 50).encode()



def test_set_card_refuses_a_card_too_big_to_read_back_as_publish_does(
        hub: LocalHub, project: Path, monkeypatch) -> None:
    """``set_card`` writes the card ``publish(card=...)`` writes, and the next publish
    without a card reads it back the same way: refused with the same words, and nothing
    written; one at the limit is taken and read back."""
    from kernelforge.hub import base

    monkeypatch.setattr(base, "SMALL_FILE_MAX", 100)
    too_big = "é" * 50 + "x"
    with pytest.raises(ValueError) as by_publish:
        hub.publish(REPO, project, version=1, card=too_big)
    with pytest.raises(ValueError) as by_set_card:
        hub.set_card(REPO, too_big)
    assert str(by_set_card.value) == str(by_publish.value) == (
        "card: 101 bytes, more than the 100 a hub reads of one file; fix: shorten "
        "it (link large images rather than embedding them)")
    assert not hub.has_repo(REPO) and not (hub.root / REPO).exists()
    rev = hub.set_card(REPO, "é" * 50)
    assert hub.read_file(REPO, rev.commit, "README.md") == ("é" * 50).encode()


def test_set_status_refuses_a_status_file_no_load_could_read(
        hub: LocalHub, project: Path, monkeypatch) -> None:
    """Every load of a repository reads its ``kernel-status.toml`` first, refusing one
    over SMALL_FILE_MAX as damaged: ``set_status`` refuses to write such a file, so that
    the repository stays loadable."""
    from kernelforge.hub import base

    first = hub.publish(REPO, project, version=1)
    monkeypatch.setattr(base, "SMALL_FILE_MAX", 64)
    status = 'kind = "redirect"\ndestination = "org/x"\n'  # 40 bytes
    with pytest.raises(ValueError) as info:
        hub.set_status(REPO, status + "#" * 30 + "\n")
    assert str(info.value) == (
        "status: 71 bytes, more than the 64 a hub reads of one file (every load of the "
        "repository would be refused); fix: shorten it (a kernel-status.toml needs a "
        "few lines)")
    assert hub.branches(REPO) == {"v1": first.commit}
    rev = hub.set_status(REPO, status)
    assert hub.read_file(REPO, rev.commit, "kernel-status.toml") == status.encode()

def test_resolve_branch_tag_commit_and_prefix(hub: LocalHub, project: Path, tmp_path: Path) -> None:
    rev = hub.publish(REPO, project, version=1)
    make_variant(tmp_path / "p2", "torch-cpu", module_id="_relu_cpu_0000002")
    rev2 = hub.publish(REPO, tmp_path / "p2", version=1)
    assert hub.tag(REPO, "stable", rev.commit[:10]) == rev.commit
    assert hub.tags(REPO) == {"stable": rev.commit}
    assert hub.resolve(REPO, "v1") == rev2.commit
    assert hub.resolve(REPO, "stable") == rev.commit
    assert hub.resolve(REPO, rev.commit) == rev.commit
    assert hub.resolve(REPO, rev.commit[:7]) == rev.commit
    assert hub.resolve(REPO, rev.commit[:7].upper()) == rev.commit  # hex, in either case
    assert hub.resolve(REPO, rev.commit.upper()) == rev.commit
    with pytest.raises(HubError, match=r"'nope' not found .*branch \(v1\).*tag \(stable\)"):
        hub.resolve(REPO, "nope")
    with pytest.raises(ValueError, match="revision"):
        hub.resolve(REPO, "")
    with pytest.raises(ValueError, match="tag"):
        hub.tag(REPO, "../evil", "v1")


def test_history_looks_the_repository_up_once(hub: LocalHub, project: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A branch's history, and a commit prefix, are read with a fixed number of lookups
    of the repository's folder, each of which lists the hub's and the organization's
    folders: one per revision made ``kernelforge versions`` of a branch with hundreds of
    revisions slow in an organization with many repositories."""
    from kernelforge.hub import base

    for i in range(6):
        hub.publish(REPO, project, version=1, message=f"r{i}", card=f"# relu {i}\n")
    listed: list[object] = []
    spellings = base.spellings
    monkeypatch.setattr(base, "spellings",
                        lambda *a, **kw: listed.append(a) or spellings(*a, **kw))
    log = hub.log(REPO, "v1")
    assert [r.message for r in log] == [f"r{i}" for i in reversed(range(6))]
    assert all(r.variants == ("torch-cpu",) for r in log)
    assert len(listed) <= 4  # the branches, then the walk: the root and the org each
    listed.clear()
    assert hub.resolve(REPO, log[-1].commit[:8]) == log[-1].commit
    assert len(listed) <= 8  # the branches, the tags, the repository, the walk


def test_ambiguous_commit_prefix(hub: LocalHub, project: Path) -> None:
    rev = hub.publish(REPO, project, version=1)
    objects = hub.commit_path(REPO, rev.commit).parent
    twin = rev.commit[:6] + ("0" if rev.commit[6] != "0" else "1") + rev.commit[7:]
    shutil.copytree(objects / rev.commit, objects / twin)
    hub.tag(REPO, "twin", twin)  # a ref reaches it: a commit of the repository
    with pytest.raises(HubError, match="ambiguous"):
        hub.resolve(REPO, rev.commit[:6])
    assert hub.resolve(REPO, rev.commit[:7]) == rev.commit


def test_missing_things_raise_hub_errors(hub: LocalHub, project: Path) -> None:
    with pytest.raises(HubError, match=f"not found: the hub directory {hub.root} does not "
                                       "exist"):
        hub.branches(REPO)
    hub.root.mkdir()
    with pytest.raises(HubError, match="not found in hub .*it is empty"):
        hub.branches(REPO)
    (hub.root / "build.toml").write_text("")  # a project given as the hub: not "empty"
    with pytest.raises(HubError, match=rf"not found: {re.escape(str(hub.root))} is not a hub "
                       r"directory: it holds .*build.toml"):
        hub.branches(REPO)
    (hub.root / "build.toml").unlink()
    rev = hub.publish(REPO, project, version=1)
    with pytest.raises(HubError, match="kernels-test/relu"):
        hub.branches("kernels-test/other")
    with pytest.raises(HubError, match="branch 'v9' not found"):
        hub.log(REPO, "v9")
    with pytest.raises(HubError, match="variant 'torch-cuda' not found .*torch-cpu"):
        hub.variant_path(REPO, rev.commit, "torch-cuda")
    with pytest.raises(HubError, match="commit 0{40} not found"):
        hub.variants(REPO, "0" * 40)


def test_a_load_before_the_first_publish_names_the_publish(hub: LocalHub) -> None:
    """A hub named (or set in KERNELFORGE_HUB) that nothing was published to yet: the
    error gives the command that publishes the repository there."""
    publish = f"'kernelforge publish PROJECT --repo {REPO} --hub {hub.root}'"
    with pytest.raises(HubError) as info:
        hub.branches(REPO)
    assert str(info.value) == (f"repository {REPO!r} not found: the hub directory "
                               f"{hub.root} does not exist; check the path, or publish to it "
                               f"first ({publish}, which creates it)")
    hub.root.mkdir()
    with pytest.raises(HubError) as info:
        hub.branches(REPO)
    assert str(info.value).endswith(f"; it is empty (publish to it with {publish})")


def test_a_repository_not_found_gets_a_did_you_mean(hub: LocalHub, project: Path) -> None:
    """A typo in the name, or the name under another organization: the error suggests
    the repository meant, and lists ten of the hub's repositories at most."""
    for n in range(12):
        hub.publish(f"org{n:02d}/kernel-{n:02d}", project, version=1)
    hub.publish("kernels-test/my-relu", project, version=1)
    for asked in ("kernels-test/my-rleu", "my-org/my-relu"):
        with pytest.raises(HubError) as info:
            hub.branches(asked)
        said = str(info.value)
        assert said.endswith("; did you mean 'kernels-test/my-relu'?"), said
        assert said.startswith(f"repository {asked!r} not found in hub {hub.root}; "
                               "repositories in this hub: kernels-test/my-relu, "
                               "org00/kernel-00, "), said
        assert "org08/kernel-08, ... (3 more)" in said and "org09" not in said, said
    with pytest.raises(HubError) as info:  # nothing close: the listing alone
        hub.branches("kernels-test/gemm")
    assert "did you mean" not in str(info.value)
    assert "kernels-test/my-relu" in str(info.value)


# --- refusals ----------------------------------------------------------------------------


def test_refuse_empty_build(hub: LocalHub, tmp_path: Path) -> None:
    (tmp_path / "p" / "build").mkdir(parents=True)
    with pytest.raises(HubError, match="holds no build variants"):
        hub.publish(REPO, tmp_path / "p", version=1)
    with pytest.raises(HubError, match="is not a directory"):
        hub.publish(REPO, tmp_path / "missing", version=1)
    (tmp_path / "unbuilt").mkdir()
    (tmp_path / "unbuilt" / "build.toml").write_text("[general]\nname = 'relu'\n")
    with pytest.raises(HubError, match="without a build/ directory; build it first"):
        hub.publish(REPO, tmp_path / "unbuilt", version=1)
    # the project's build/ named directly, before it exists: the same advice
    with pytest.raises(HubError, match=r"unbuilt is a kernel project without a build/ "
                                       r"directory; build it first \(kernelforge build "):
        hub.publish(REPO, tmp_path / "unbuilt" / "build", version=1)
    assert hub.repos() == []


def test_an_unbuilt_project_is_refused_in_one_text(hub: LocalHub, tmp_path: Path) -> None:
    """publish (both ways of naming the project) and get_local_kernel say the same."""
    from kernelforge.hub._staging import unbuilt_project
    from kernelforge.loader import get_local_kernel

    project = tmp_path / "unbuilt"
    project.mkdir()
    (project / "build.toml").write_text("[general]\nname = 'relu'\n")
    text = unbuilt_project(project)
    assert text == (f"{project} is a kernel project without a build/ directory; build it "
                    f"first (kernelforge build {project})")
    for where in (project, project / "build"):
        with pytest.raises(HubError) as info:
            hub.publish(REPO, where, version=1)
        assert str(info.value) == text
    with pytest.raises(HubError) as info:
        get_local_kernel(project)
    assert str(info.value) == f"path: {text}"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda v: (v / "stale.pyc").write_bytes(b"\0"), r"stale\.pyc: compiled bytecode"),
        (lambda v: (v / "metadata.json").unlink(), r"metadata\.json: missing"),
        (lambda v: (v / "metadata.json").write_text("{nope"), "not valid JSON"),
        (lambda v: (v / "metadata.json").write_text('{"name": "relu", "id": "a-b"}'),
         "key 'id' must be a Python identifier"),
        (lambda v: (v / "metadata.json").write_text(
            '{"name": "relu", "id": "a_b", "digest": {"algorithm": "md5", "files": {}}}'),
         r"metadata\.json: key 'digest' must be \{\"algorithm\": sha256 \| sha512"),
        (lambda v: (v / "link.py").symlink_to(v / "helper.py"), "link.py: only regular files"),
        (lambda v: (v / "ld").symlink_to(v), "ld: symbolic links cannot be published"),
        (lambda v: (v.parent / "notes.txt").write_text("x"), "notes.txt: only variant directories"),
        (lambda v: (v.parent / "scratch").mkdir(), r"scratch: 'scratch' is not a build variant "
         r"name \(unrecognised form\).*; fix: remove it from build/ or move it elsewhere: "
         "publish takes every directory there for a variant"),
    ],
)
def test_refuse_unfit_builds(hub: LocalHub, project: Path, damage, message: str) -> None:
    damage(project / "build" / "torch-cpu")
    with pytest.raises(HubError, match=message):
        hub.publish(REPO, project, version=1)
    assert hub.repos() == []


def test_refuse_version_mismatch(hub: LocalHub, project: Path) -> None:
    with pytest.raises(HubError, match=r"key 'version' is 1 but .* version 2 \(branch v2\)"):
        hub.publish(REPO, project, version=2)
    with pytest.raises(ValueError, match="version"):
        hub.publish(REPO, project, version="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="version"):
        hub.publish(REPO, project, version=True)


@pytest.mark.parametrize("written", [True, 1.0])
def test_refuse_a_metadata_version_that_is_not_an_integer(hub: LocalHub, tmp_path: Path,
                                                         written: object) -> None:
    """``"version": true`` (or 1.0) equals 1 to Python, but a load refuses a signed build
    whose version is not an integer as recording none: publish refuses it, signed or not,
    rather than publishing (and signing) a build that cannot be loaded."""
    from kernelforge import signing

    vdir = make_variant(tmp_path / "p", "torch-cpu", with_digest=False)
    meta = json.loads((vdir / "metadata.json").read_text())
    meta["version"] = written
    (vdir / "metadata.json").write_text(json.dumps(meta))
    meta["digest"] = digest.digest_block(vdir)
    (vdir / "metadata.json").write_text(json.dumps(meta))
    key = signing.generate_key(tmp_path / "k.pem")
    for signer in (None, key):
        with pytest.raises(HubError, match=rf"metadata.json: key 'version' must be an integer "
                           rf"\(the major version\), got {written!r}; .*rebuild"):
            hub.publish(REPO, tmp_path / "p", version=1, signer=signer)
    assert not hub.has_repo(REPO)  # nothing was written


def test_metadata_without_version_or_digest_is_accepted(hub: LocalHub, tmp_path: Path) -> None:
    make_variant(tmp_path / "p", "torch-cpu", version=None, with_digest=False)
    rev = hub.publish(REPO, tmp_path / "p", version=3)
    assert hub.versions(REPO) == {3: rev.commit}
    assert "build/torch-cpu/helper.py" in hub.recorded_files(REPO, rev.commit)


def test_signing_a_build_that_records_no_version_is_refused(hub: LocalHub,
                                                          tmp_path: Path) -> None:
    from kernelforge import signing
    from kernelforge.errors import TrustError

    make_variant(tmp_path / "p", "torch-cpu", version=None)
    key = signing.generate_key(tmp_path / "k.pem")
    with pytest.raises(TrustError, match=r"cannot sign variant\(s\) torch-cpu: .*records no "
                       r"version.*rebuild with 'kernelforge build'"):
        hub.publish(REPO, tmp_path / "p", version=1, signer=key)
    assert not hub.has_repo(REPO)  # nothing was written

def test_signing_a_build_without_digest_is_refused(hub: LocalHub, tmp_path: Path) -> None:
    from kernelforge import signing
    from kernelforge.errors import TrustError

    make_variant(tmp_path / "p", "torch-cpu", with_digest=False)
    make_variant(tmp_path / "p", "torch-universal")
    key = signing.generate_key(tmp_path / "k.pem")
    with pytest.raises(TrustError, match=r"cannot sign variant\(s\) torch-cpu: .*no file "
                                         r"digests.*rebuild with 'kernelforge build'"):
        hub.publish(REPO, tmp_path / "p", version=1, signer=key)
    assert not hub.has_repo(REPO)  # nothing was written
    assert hub.publish(REPO, tmp_path / "p", version=1).variants  # unsigned is still fine


def test_refuse_files_that_do_not_match_their_digest(hub: LocalHub, project: Path) -> None:
    (project / "build" / "torch-cpu" / "helper.py").write_text("tampered = True\n")
    with pytest.raises(IntegrityError, match="changed: helper.py") as info:
        hub.publish(REPO, project, version=1)
    text = str(info.value)
    assert text.startswith(f"refusing to publish {project / 'build' / 'torch-cpu'}: its files "
                           "do not match the digests its metadata.json records")
    assert "refusing to load" not in text and "rebuild it (kernelforge build)" in text
    assert not (hub.root / "kernels-test").exists()  # a first publish: no folder left


def _tampered(root: Path) -> Path:
    make_variant(root, "torch-cpu", module_id="_relu_cpu_0000003")
    (root / "build" / "torch-cpu" / "helper.py").write_text("tampered = True\n")
    return root


def test_a_refused_first_publish_leaves_no_folder_that_decides_the_spelling(
        hub: LocalHub, project: Path, tmp_path: Path) -> None:
    """Ids are spelt as the repository (and organization) first published: a publish
    that was refused published nothing, so it decides nothing."""
    with pytest.raises(IntegrityError, match="refusing to publish"):
        hub.publish("Zed/Failed", _tampered(tmp_path / "bad"), version=1)
    assert sorted(p.name for p in hub.root.iterdir() if not p.name.startswith(".")) == []
    assert hub.publish("zed/failed", project, version=1).repo_id == "zed/failed"
    with pytest.raises(IntegrityError, match="refusing to publish"):  # the org is kept
        hub.publish("zed/third", tmp_path / "bad", version=1)
    assert sorted(p.name for p in (hub.root / "zed").iterdir()) == ["failed"]
    assert hub.publish("ZED/other", project, version=1).repo_id == "zed/other"
    assert hub.repos() == ["zed/failed", "zed/other"]


def test_what_a_killed_first_publish_left_decides_no_spelling(
        hub: LocalHub, project: Path) -> None:
    """A first publish killed outright (kill -9) cannot take its folders away; the next
    first publish, which holds the hub's create lock as any first publish does, finds
    them unused and takes them away if they hold no revision, then publishes under its
    own spelling."""
    left = hub.root / "Zed" / "Failed"
    (left / "tmp" / "stage-1234" / "build").mkdir(parents=True)
    (left / "tmp" / "stage-1234" / "build" / "half-copied.so").write_bytes(b"\0" * 64)
    (left / "objects").mkdir()
    (left / ".lock").write_text("")
    assert hub.publish("zed/failed", project, version=1).repo_id == "zed/failed"
    assert sorted(p.name for p in hub.root.iterdir() if not p.name.startswith(".")) == ["zed"]
    assert hub.repos() == ["zed/failed"]
    # one that holds a revision that no pending note names (put there by hand, or by a
    # kernelforge that wrote none) is kept
    kept = hub.root / "Kept" / "Repo" / "objects" / ("0" * 40)
    kept.mkdir(parents=True)
    (kept / "file").write_text("x")
    assert hub.publish("kept/repo", project, version=1).repo_id == "Kept/Repo"


def test_a_leftover_whose_tmp_is_a_link_is_refused_before_anything_is_removed(
        hub: LocalHub, project: Path, tmp_path: Path) -> None:
    """Taking away what a killed first publish left must not follow a link: a ``tmp/``
    that leads out of the hub is refused, and the folder it leads to keeps its files."""
    from kernelforge.errors import HubError

    elsewhere = tmp_path / "precious"
    (elsewhere / "data").mkdir(parents=True)
    (elsewhere / "data" / "x.csv").write_text("1,2")
    (hub.root / "org" / "relu").mkdir(parents=True)
    (hub.root / "org" / "relu" / "tmp").symlink_to(elsewhere)
    with pytest.raises(HubError, match="symbolic link"):
        hub.publish("org/relu", project, version=1)
    assert (elsewhere / "data" / "x.csv").read_text() == "1,2"


def test_a_first_publish_waiting_on_a_refused_one_makes_its_own_folder(
        hub: LocalHub, project: Path, tmp_path: Path, monkeypatch) -> None:
    """Another first publish of the repository, under another spelling, that starts
    while a refused one is being checked waits for it, then publishes under its own
    spelling into a folder of its own (the refused one's is gone by then)."""
    import threading

    from kernelforge.hub import _local_write

    real = _local_write.check_digests
    other: dict[str, object] = {}

    def publish_other() -> None:
        try:
            other["rev"] = LocalHub(hub.root).publish("zed/failed", project, version=1)
        except BaseException as err:  # reported by the assertions below
            other["error"] = err

    waiting = threading.Thread(target=publish_other)

    def check_while_another_starts(copy_root, staged, recorded):
        if not waiting.is_alive() and "rev" not in other:
            waiting.start()
            waiting.join(timeout=1.0)  # it waits on the hub's lock meanwhile
            assert waiting.is_alive(), other
        return real(copy_root, staged, recorded)

    monkeypatch.setattr(_local_write, "check_digests", check_while_another_starts)
    with pytest.raises(IntegrityError, match="refusing to publish"):
        hub.publish("Zed/Failed", _tampered(tmp_path / "bad"), version=1)
    waiting.join(timeout=60)
    assert "error" not in other, other
    assert isinstance(other["rev"], Revision) and other["rev"].repo_id == "zed/failed"
    assert [p.name for p in hub.root.iterdir() if not p.name.startswith(".")] == ["zed"]
    assert hub.repos() == ["zed/failed"]


def test_a_first_publish_whose_ref_cannot_be_written_keeps_its_revision(
        hub: LocalHub, project: Path, monkeypatch) -> None:
    """A failed publish takes away only the empty folders of a publish that wrote
    nothing: a revision whose ref could not be written is kept, unlisted, until the next
    publish, which removes it (its pending note names it) as what a killed one left."""
    def no_space(path: Path, commit: str) -> None:
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(_durable, "write_ref", no_space)
    with pytest.raises(HubError, match="No space left on device"):
        hub.publish(REPO, project, version=1)
    monkeypatch.undo()
    objects = hub.root / "kernels-test" / "relu" / "objects"
    assert len(list(objects.iterdir())) == 1 and not hub.has_repo(REPO)
    rev = hub.publish(REPO, project, version=1)
    assert rev.repo_id == REPO and [p.name for p in objects.iterdir()] == [rev.commit]


# --- atomicity ---------------------------------------------------------------------------


def _second_build(tmp_path: Path) -> Path:
    root = tmp_path / "second"
    make_variant(root, "torch-cpu", module_id="_relu_cpu_0000002", value=2)
    return root


@pytest.mark.parametrize("step", ["copy", "rename", "replace"])
def test_failed_publish_keeps_previous_revision(
    hub: LocalHub, project: Path, tmp_path: Path, monkeypatch, step: str
) -> None:
    first = hub.publish(REPO, project, version=1)

    def boom(*args, **kwargs):
        raise OSError(f"simulated failure in {step}")

    if step == "copy":
        real_copy = _durable.copy_file
        calls = []

        def copy_then_fail(src, dst):
            calls.append(src)
            if len(calls) == 2:
                boom()
            return real_copy(src, dst)

        monkeypatch.setattr(_durable, "copy_file", copy_then_fail)
    else:
        monkeypatch.setattr(os, step, boom)
    with pytest.raises(HubError, match=f"writing to the hub {hub.root} failed "
                                       r"\(simulated failure"):
        hub.publish(REPO, _second_build(tmp_path), version=1)
    monkeypatch.undo()

    assert hub.branches(REPO) == {"v1": first.commit}
    assert [r.commit for r in hub.log(REPO, "v1")] == [first.commit]
    hub.verify(REPO, first.commit)
    repo = hub.root / "kernels-test" / "relu"
    assert list((repo / "refs" / "heads").iterdir()) == [repo / "refs" / "heads" / "v1"]
    third = hub.publish(REPO, _second_build(tmp_path / "again"), version=1)
    assert third.parent == first.commit
    assert list((repo / "tmp").iterdir()) == []


_KILL_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from kernelforge import _durable
    from kernelforge.hub import LocalHub

    hub_root, build, point = sys.argv[1], sys.argv[2], sys.argv[3]

    def pause():
        print("PAUSED", flush=True)
        time.sleep(600)

    real_copy, real_rename, real_replace = _durable.copy_file, os.rename, os.replace
    copied = []

    def copy_file(src, dst):
        digest = real_copy(src, dst)
        copied.append(dst)
        if point == "copy" and len(copied) == 3:
            pause()
        return digest

    def rename(src, dst):
        if point == "rename":
            pause()
        real_rename(src, dst)

    def replace(src, dst):
        if point == "replace":
            pause()
        real_replace(src, dst)
        if point == "after":
            pause()

    _durable.copy_file = copy_file
    os.rename = rename
    os.replace = replace
    LocalHub(hub_root).publish("kernels-test/relu", build, version=1, message="killed")
    print("DONE", flush=True)
    """
)


@pytest.mark.parametrize("point", ["copy", "rename", "replace", "after"])
def test_sigkill_mid_publish(hub: LocalHub, project: Path, tmp_path: Path, point: str) -> None:
    first = hub.publish(REPO, project, version=1)
    big = _second_build(tmp_path)
    for i in range(4):  # a large-ish build: several MiB over several files
        (big / "build" / "torch-cpu" / f"blob{i}.bin").write_bytes(os.urandom(2 << 20))
    meta_path = big / "build" / "torch-cpu" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["digest"] = digest.digest_block(big / "build" / "torch-cpu")
    meta_path.write_text(json.dumps(meta))

    proc = subprocess.Popen(
        [sys.executable, "-c", _KILL_SCRIPT, str(hub.root), str(big), point],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "PAUSED"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    repo = hub.root / "kernels-test" / "relu"
    heads = hub.branches(REPO)
    if point == "after":  # the ref had moved: the new revision is complete and current
        assert heads["v1"] != first.commit
        assert hub.revision(REPO, heads["v1"]).parent == first.commit
        hub.verify(REPO, heads["v1"])
    else:
        assert heads == {"v1": first.commit}
        assert [r.commit for r in hub.log(REPO, "v1")] == [first.commit]
    hub.verify(REPO, first.commit)
    assert hub.variants(REPO, first.commit) == ["torch-cpu"]
    # no partial object is ever visible: every object dir is a complete, verified revision
    for obj in (repo / "objects").iterdir():
        hub.verify(REPO, obj.name)
    if point in ("copy", "rename"):
        assert list((repo / "tmp").iterdir())  # the leftover exists but is ignored ...
    again = _second_build(tmp_path / "again")
    hub.publish(REPO, again, version=1)  # ... and the next publish (taking the lock) cleans it
    assert list((repo / "tmp").iterdir()) == []
    assert not list((repo / "refs" / "heads").glob(".*"))



# Publishes sys.argv[2] to sys.argv[3] in the hub sys.argv[1], pausing (for the parent's
# SIGKILL) once the revision is in objects/: before its ref is written ("ref"), or with
# the ref's folders made but not its file ("ref-file").
_KILL_AT_REF_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from kernelforge import _durable
    from kernelforge.hub import LocalHub

    hub_root, build, repo_id, point = sys.argv[1:5]

    def pause():
        print("PAUSED", flush=True)
        time.sleep(600)

    real_write_ref, real_replace = _durable.write_ref, os.replace

    def write_ref(path, commit):
        if point == "ref":
            pause()
        real_write_ref(path, commit)

    def replace(src, dst):
        if point == "ref-file" and os.path.basename(dst) == "v1":
            pause()
        real_replace(src, dst)

    _durable.write_ref = write_ref
    os.replace = replace
    LocalHub(hub_root).publish(repo_id, build, version=1)
    print("DONE", flush=True)
    """
)


def _kill_at(hub: LocalHub, build: Path, repo_id: str, point: str) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _KILL_AT_REF_SCRIPT, str(hub.root),
                             str(build), repo_id, point], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "PAUSED"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize("point", ["ref", "ref-file"])
def test_what_publishes_killed_before_their_ref_left_goes_with_the_next_publish(
        hub: LocalHub, project: Path, tmp_path: Path, point: str) -> None:
    """A publish killed once its revision is in ``objects/`` but before its branch names
    it leaves a complete revision no ref reaches, which no one was told of. The next
    publish, under the repository's lock, removes it (the next killed one too): repeated
    kills (a CI time limit) do not pile up copies of the build, and every revision left
    is one a ref reaches."""
    first = hub.publish(REPO, project, version=1)
    objects = hub.root / REPO / "objects"
    for i in range(3):
        make_variant(tmp_path / f"killed{i}", "torch-cpu", module_id=f"_relu_cpu_000001{i}")
        _kill_at(hub, tmp_path / f"killed{i}", REPO, point)
        assert hub.branches(REPO) == {"v1": first.commit}  # never a half-moved branch
        # the head, and the last dead publish's revision (unreachable), not one per kill
        assert len(list(objects.iterdir())) == 2
    rev = hub.publish(REPO, _second_build(tmp_path), version=1)
    assert rev.parent == first.commit
    assert sorted(p.name for p in objects.iterdir()) == sorted([first.commit, rev.commit])
    assert list((hub.root / REPO / "tmp").iterdir()) == []
    for commit in (first.commit, rev.commit):
        hub.verify(REPO, commit)


@pytest.mark.parametrize("point", ["ref", "ref-file"])
def test_a_first_publish_killed_before_its_ref_leaves_no_repository(
        hub: LocalHub, project: Path, tmp_path: Path, point: str) -> None:
    """Killed at its ref, a first publish published nothing: the hub lists no repository
    (a load with no hub given goes on to the Hugging Face Hub, rather than finding a
    repository here with no versions), and the next first publish, under any spelling,
    finds nothing of it: its own spelling is the repository's."""
    _kill_at(hub, project, REPO, point)
    assert hub.repos() == [] and not hub.has_repo(REPO)
    rev = hub.publish("Kernels-Test/Relu", _second_build(tmp_path), version=1)
    assert rev.repo_id == "Kernels-Test/Relu" and hub.repos() == ["Kernels-Test/Relu"]
    repo = hub.root / "Kernels-Test" / "Relu"
    assert [p.name for p in (repo / "objects").iterdir()] == [rev.commit]
    assert sorted(p.name for p in hub.root.iterdir() if not p.name.startswith(".")) == [
        "Kernels-Test"]

_CONCURRENT_SCRIPT = textwrap.dedent(
    """
    import sys
    from kernelforge.hub import LocalHub
    hub = LocalHub(sys.argv[1])
    for i in range(3):  # each with its own card, so that each makes a revision
        hub.publish("kernels-test/relu", sys.argv[2], version=1, message=sys.argv[3],
                    card=f"{sys.argv[3]}{i}")
    """
)


def test_concurrent_publishers_serialise(hub: LocalHub, project: Path, tmp_path: Path) -> None:
    other = _second_build(tmp_path)
    procs = [
        subprocess.Popen([sys.executable, "-c", _CONCURRENT_SCRIPT, str(hub.root), str(p), tag])
        for p, tag in ((project, "a"), (other, "b"))
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    log = hub.log(REPO, "v1")
    assert len(log) == 6  # every publish is in the history: none overwrote another
    assert sorted(r.message for r in log) == ["a", "a", "a", "b", "b", "b"]
    assert log[-1].parent is None


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_a_publish_with_an_owner_key_others_can_read_stops_with_the_fix(
        hub: LocalHub, project: Path) -> None:
    from kernelforge import trust
    from kernelforge.errors import TrustError

    hub.publish(REPO, project, version=1)  # makes the owner key
    key_file = trust.config_dir() / "owner.key"
    key_file.chmod(0o644)
    other = "kernels-test/other"
    with pytest.raises(TrustError, match=r"owner key is readable or writable by other users.*"
                       r"fix: chmod 600"):
        hub.publish(other, project, version=1)
    assert not hub.has_repo(other) or not hub.branches(other)  # nothing was published
    assert not list((hub.root / other / "tmp").glob("*"))


def test_a_hub_named_local_is_told_the_default_needs_no_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(HubError, match=r"the hub directory local does not exist.*for the "
                       r"default local hub, leave the hub out"):
        LocalHub("local").branches(REPO)
