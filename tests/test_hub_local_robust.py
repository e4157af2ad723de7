"""The local hub against damage and odd input: folders planted in a revision, paths and
variant names that leave it, a publish killed before its ref moved, what a power loss
could drop (the order of writes and directory fsyncs), unusable hub paths and corrupt
refs and records. Each is a HubError (or ValueError for a malformed argument) that says
what is wrong and what to do, never a raw OSError, nor a wrong answer."""

from __future__ import annotations

import json
import os
import pathlib
import sys
import uuid
from pathlib import Path

import pytest
from kf_testutil import write_metadata

from kernelforge import _durable
from kernelforge.errors import HubError
from kernelforge.hub import LocalHub

pytestmark = pytest.mark.usefixtures("cpu_system")

pytest.importorskip("kernelforge.variants")

REPO = "kernels-test/robust"


def make_variant(project: Path, variant: str = "torch-cpu", *, value: int = 1) -> Path:
    """Fabricate ``project/build/<variant>/``: a tiny pure-Python kernel package."""
    vdir = project / "build" / variant
    vdir.mkdir(parents=True)
    (vdir / "__init__.py").write_text(f"VALUE = {value}\n")
    write_metadata(vdir, f"_robust_{uuid.uuid4().hex[:10]}", version=1)
    return vdir


@pytest.fixture
def hub(tmp_path: Path) -> LocalHub:
    return LocalHub(tmp_path / "hub")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    make_variant(tmp_path / "relu")
    return tmp_path / "relu"


def _writable(path: Path) -> None:
    path.chmod(0o644)


# --- F2: a folder planted under build/ is no variant -------------------------------------


def test_a_variant_folder_planted_after_the_publish_is_no_variant(hub: LocalHub,
                                                                   tmp_path: Path) -> None:
    """The owner mark covers the files the record lists; a folder added to the revision
    later is not listed, so it is never chosen, nor called "published by you"."""
    from kernelforge import kernel_info

    make_variant(tmp_path / "p", "torch-universal")
    rev = hub.publish(REPO, tmp_path / "p", version=1)
    planted = hub.commit_path(REPO, rev.commit) / "build" / "torch-cpu"
    make_variant(tmp_path / "evil", "torch-cpu", value=666)
    os.rename(tmp_path / "evil" / "build" / "torch-cpu", planted)

    assert hub.variants(REPO, rev.commit) == ["torch-universal"]
    assert hub.revision(REPO, rev.commit).variants == ("torch-universal",)
    for call in (hub.variant_path, hub.fetch_variant):
        with pytest.raises(HubError, match=r"variant 'torch-cpu' not found .*variants: "
                                           r"torch-universal; .*torch-cpu is not in the "
                                           r"commit's record: it was added after the publish"
                                           r".*remove it"):
            call(REPO, rev.commit, "torch-cpu")
    assert hub.read_file(REPO, rev.commit, "build/torch-cpu/metadata.json") is None
    info = kernel_info(REPO, version=1, hub=hub)
    assert info.variant == "torch-universal"
    fetched = hub.fetch_variant(REPO, rev.commit, "torch-universal")
    assert fetched.owned and set(fetched.recorded or {}) == {"__init__.py", "metadata.json"}


def test_a_recorded_variant_whose_folder_is_gone_is_named_as_damage(hub: LocalHub,
                                                                      project: Path) -> None:
    """... and publishing the build again, as the message says, repairs the branch: a
    damaged head is no reason to skip the publish as unchanged."""
    import shutil

    rev = hub.publish(REPO, project, version=1)
    vdir = hub.variant_path(REPO, rev.commit, "torch-cpu")
    shutil.rmtree(vdir)
    with pytest.raises(HubError, match="is recorded, but its folder .* is missing: the hub "
                                       "is damaged; publish the build again"):
        hub.fetch_variant(REPO, rev.commit, "torch-cpu")
    again = hub.publish(REPO, project, version=1)
    assert again.commit != rev.commit and again.parent == rev.commit
    assert hub.fetch_variant(REPO, again.commit, "torch-cpu").owned
    hub.verify(REPO, again.commit)
    assert hub.publish(REPO, project, version=1).commit == again.commit  # intact: no-op


# --- F3: names and paths that leave the revision -----------------------------------------


@pytest.mark.parametrize("name", ["..", ".", "", "torch-cpu/..", "build", "\0x", "x" * 5000,
                                  "torch-cpu/", "../torch-cpu"])
def test_a_variant_name_that_is_no_recorded_variant_is_refused(hub: LocalHub, project: Path,
                                                                name: str) -> None:
    rev = hub.publish(REPO, project, version=1)
    for call in (hub.variant_path, hub.fetch_variant):
        with pytest.raises(HubError, match=r"not found in kernels-test/robust at .*variants: "
                                           r"torch-cpu$"):
            call(REPO, rev.commit, name)


@pytest.mark.parametrize("path", [
    ".commit.json", "./.commit.json", "build/../.commit.json", "build/torch-cpu/./x",
    "build/torch-cpu/metadata.json/", "build//torch-cpu/metadata.json", "/etc/passwd",
    "build\\torch-cpu", "", "a\0b",
])
def test_read_file_takes_only_plain_paths_in_the_revision(hub: LocalHub, project: Path,
                                                          path: str) -> None:
    rev = hub.publish(REPO, project, version=1)
    with pytest.raises(ValueError, match="is not a file path inside a revision"):
        hub.read_file(REPO, rev.commit, path)


def test_read_file_reads_recorded_files_only(hub: LocalHub, project: Path,
                                             monkeypatch) -> None:
    rev = hub.publish(REPO, project, version=1, card="hello")
    assert hub.read_file(REPO, rev.commit, "README.md") == b"hello"
    assert hub.read_file(REPO, rev.commit, "x" * 5000) is None  # no OSError: not recorded
    (hub.commit_path(REPO, rev.commit) / "build" / "extra.txt").write_text("planted")
    assert hub.read_file(REPO, rev.commit, "build/extra.txt") is None

    def unreadable(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", unreadable)
    with pytest.raises(HubError, match=r"cannot read .*README\.md \(Permission denied\); "
                                       "check its permissions"):
        hub.read_file(REPO, rev.commit, "README.md")


# --- F4: every new entry is fsynced into its folder before it is published ---------------


def test_every_new_entry_is_fsynced_into_its_folder_before_it_counts(tmp_path: Path,
                                                                      project: Path,
                                                                      monkeypatch) -> None:
    """A power loss may drop a directory entry not fsynced in its folder. So: every file
    and folder of a revision is flushed into its folder after it is written and before
    the rename that makes the revision visible; every folder new outside it (the hub
    root, <org>/, <org>/<name>/, objects/) and the revision itself before the ref that
    reaches it moves; the ref file, before the publish returns. A repository's first
    ref is written in a refs/ folder under tmp/ (refs/heads/ and the ref file flushed
    like a revision's) that is renamed into place, and flushed there."""
    from kernelforge.signing import generate_key

    key = generate_key(tmp_path / "k.pem")
    hub = LocalHub(tmp_path / "new" / "hub")  # nothing of it exists yet
    events: list[tuple[str, Path, Path | None]] = []
    real_fsync, real_write, real_copy = _durable.fsync_dir, _durable.write_file, \
        _durable.copy_file
    real_mkdir, real_rename, real_replace = os.mkdir, os.rename, os.replace

    def fsync_dir(path):
        events.append(("fsync", Path(path), None))
        real_fsync(path)

    def write_file(path, data):
        out = real_write(path, data)
        events.append(("new", Path(path), None))
        return out

    def copy_file(src, dst):
        out = real_copy(src, dst)
        events.append(("new", Path(dst), None))
        return out

    def mkdir(path, *args, **kwargs):
        real_mkdir(path, *args, **kwargs)
        events.append(("new", Path(os.fsdecode(path)), None))

    def rename(src, dst):
        real_rename(src, dst)
        events.append(("rename", Path(src), Path(dst)))

    def replace(src, dst):
        real_replace(src, dst)
        events.append(("replace", Path(src), Path(dst)))

    monkeypatch.setattr(_durable, "fsync_dir", fsync_dir)
    monkeypatch.setattr(_durable, "write_file", write_file)
    monkeypatch.setattr(_durable, "copy_file", copy_file)
    monkeypatch.setattr(os, "mkdir", mkdir)
    if sys.version_info < (3, 11):  # Path.mkdir calls an os.mkdir its accessor bound at import
        monkeypatch.setattr(pathlib._NormalAccessor, "mkdir", staticmethod(mkdir))
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "replace", replace)
    hub.publish(REPO, project, version=1, signer=key, card="hello")  # v1, then main
    monkeypatch.undo()

    renames = [(i, src) for i, (what, src, _) in enumerate(events) if what == "rename"]
    staging = hub.root / REPO / "tmp"
    # a ref moves where a ref file replaces another in refs/, or where refs/ comes
    refs = [i for i, (what, _, dst) in enumerate(events) if dst is not None and (
        (what == "replace" and dst.parent.name in ("heads", "tags")
         and not dst.is_relative_to(staging)) or (what == "rename" and dst.name == "refs"))]
    # two revisions and the first refs/ folder, two ref moves (v1's folder, then main)
    assert len(renames) == 3 and len(refs) == 2 and events[refs[0]][0] == "rename"

    def fsynced(folder: Path, after: int, before: int) -> bool:
        return any(what == "fsync" and path == folder
                   for what, path, _ in events[after + 1:before])

    checked = []
    for i, (what, path, dst) in enumerate(events):
        if not path.is_relative_to(tmp_path / "new"):
            continue  # the owner key, made in the config folder on a first publish
        inside = next((r for r, tmp in renames if path.is_relative_to(tmp) and path != tmp),
                      None)
        if what == "new" and inside is not None:  # a file or folder of a revision
            assert fsynced(path.parent, i, inside), f"{path} not flushed before the rename"
        elif what == "new" and path.parent.name != "tmp" and path.name != "tmp":
            until = next(r for r in refs if r > i)
            assert fsynced(path.parent, i, until), f"{path} not flushed before the ref moved"
        elif what == "rename" and i in refs:
            assert dst is not None
            assert fsynced(dst.parent, i, len(events)), f"{dst} not flushed"
            path = dst  # refs/, checked below
        elif what == "rename":
            assert dst is not None
            until = next(r for r in refs if r > i)
            assert fsynced(dst.parent, i, until), f"{dst} not flushed before the ref moved"
        elif what == "replace" and (i in refs or dst is not None
                                    and dst.is_relative_to(staging)):
            assert dst is not None
            assert fsynced(dst.parent, i, len(events)), f"{dst} not flushed"
        else:
            continue
        checked.append(path)
    names = {p.name for p in checked}
    # the signature and the card are written after copy_tree's fsyncs: checked too
    assert {"torch-cpu.sig", "README.md", ".commit.json", "kernels-test", "robust", "hub",
            "new", "objects", "refs", "heads"} <= names


# --- F5: what a publish killed before its ref moved left behind --------------------------


def test_a_revision_reaches_objects_only_once_its_pending_note_is_flushed(
        hub: LocalHub, project: Path, tmp_path: Path, monkeypatch) -> None:
    """A publish killed just after renaming its revision into ``objects/`` leaves it
    to the next writer only if the note naming it is there: the note is written, and
    ``tmp/`` flushed, before that rename, for a first publish and a later one alike."""
    tmp = hub.root / REPO / "tmp"
    flushed: list[set[str]] = []  # the notes in tmp/ at each flush of tmp/
    entered: list[tuple[str, int]] = []  # (commit, flushes so far) at each rename
    real_fsync, real_rename = _durable.fsync_dir, os.rename

    def fsync_dir(path):
        real_fsync(path)
        if Path(path) == tmp:
            flushed.append({n.read_text() for n in tmp.glob("*.pending")})

    def rename(src, dst):
        if Path(dst).parent.name == "objects":
            entered.append((Path(dst).name, len(flushed)))
        real_rename(src, dst)

    monkeypatch.setattr(_durable, "fsync_dir", fsync_dir)
    monkeypatch.setattr(os, "rename", rename)
    first = hub.publish(REPO, project, version=1)
    make_variant(tmp_path / "p2", value=2)
    second = hub.publish(REPO, tmp_path / "p2", version=1)
    monkeypatch.undo()
    assert [commit for commit, _ in entered] == [first.commit, second.commit]
    for commit, flushes in entered:
        assert any(commit + "\n" in notes for notes in flushed[:flushes]), commit
    assert list(tmp.iterdir()) == []  # each note went once its ref named the commit



def test_an_object_no_ref_reaches_is_no_commit_of_the_repository(hub: LocalHub,
                                                                 project: Path,
                                                                 tmp_path: Path,
                                                                 monkeypatch) -> None:
    """A publish that fails after the rename and before the ref moves leaves a complete
    object; the publisher was told it failed, so no short id finds it and it makes no
    short id ambiguous. Its full id (which no one was told) still names it."""
    first = hub.publish(REPO, project, version=1)

    def die(path: Path, commit: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_durable, "write_ref", die)
    make_variant(tmp_path / "p2", value=2)
    with pytest.raises(HubError, match="No space left"):
        hub.publish(REPO, tmp_path / "p2", version=1)
    monkeypatch.undo()
    objects = hub.commit_path(REPO, first.commit).parent
    orphan = next(p.name for p in objects.iterdir() if p.name != first.commit)

    assert hub.branches(REPO) == {"v1": first.commit}
    assert [r.commit for r in hub.log(REPO, "v1")] == [first.commit]
    for prefix in (orphan[:6], orphan[:12], orphan[:39], orphan[:8].upper()):
        with pytest.raises(HubError, match=f"revision '{prefix.lower()}' not found"):
            hub.resolve(REPO, prefix)
    assert hub.resolve(REPO, orphan) == orphan  # the full id, as a lock file pins it

    # nor does it make a prefix of a real commit ambiguous
    twin = first.commit[:6] + ("0" if first.commit[6] != "0" else "1") + first.commit[7:]
    os.rename(objects / orphan, objects / twin)
    assert hub.resolve(REPO, first.commit[:6]) == first.commit
    # once a ref reaches it, it is a commit like any other
    hub.tag(REPO, "kept", twin)
    with pytest.raises(HubError, match="ambiguous"):
        hub.resolve(REPO, first.commit[:6])



def test_a_dead_publishs_revision_that_a_ref_names_since_is_kept(hub: LocalHub,
                                                                 project: Path,
                                                                 tmp_path: Path,
                                                                 monkeypatch) -> None:
    """The next publish removes a revision that a publish which failed before its ref
    left, unless a ref reaches it by then (tagged by its full id, say): then it is a
    commit of the repository, and stays."""
    first = hub.publish(REPO, project, version=1)

    def die(path: Path, commit: str) -> None:
        raise OSError(28, "No space left on device")

    for i in (2, 3):
        monkeypatch.setattr(_durable, "write_ref", die)
        make_variant(tmp_path / f"p{i}", value=i)
        with pytest.raises(HubError, match="No space left"):
            hub.publish(REPO, tmp_path / f"p{i}", version=1)
        monkeypatch.undo()
        if i == 2:
            objects = hub.commit_path(REPO, first.commit).parent
            tagged = next(p.name for p in objects.iterdir() if p.name != first.commit)
            hub.tag(REPO, "kept", tagged)
    # the failed publish of p3 removed nothing a ref reaches; its own revision is left
    assert len(list(objects.iterdir())) == 3
    make_variant(tmp_path / "p4", value=4)
    last = hub.publish(REPO, tmp_path / "p4", version=1)
    assert sorted(p.name for p in objects.iterdir()) == sorted(
        [first.commit, tagged, last.commit])
    assert hub.resolve(REPO, "kept") == tagged
    hub.verify(REPO, tagged)


def test_only_a_pending_note_a_publish_wrote_removes_a_revision(hub: LocalHub,
                                                                project: Path,
                                                                tmp_path: Path) -> None:
    """A link in ``tmp/`` named like a pending note is no note: it is removed with the
    rest of ``tmp/``, and neither what it leads to nor the object it would name is."""
    first = hub.publish(REPO, project, version=1)
    objects = hub.commit_path(REPO, first.commit).parent
    stray = "ab" * 20
    (objects / stray).mkdir()
    (objects / stray / "file").write_text("kept")
    outside = tmp_path / "outside"
    outside.write_text(stray + "\n")
    (objects.parent / "tmp" / "0123456789abcdef.pending").symlink_to(outside)
    make_variant(tmp_path / "p2", value=2)
    hub.publish(REPO, tmp_path / "p2", version=1)
    assert (objects / stray / "file").read_text() == "kept"
    assert outside.read_text() == stray + "\n"
    assert list((objects.parent / "tmp").iterdir()) == []

def _pending_notes_stay(monkeypatch) -> None:
    """Make every removal of a pending note fail, as a file system that refuses it
    (no permission, an I/O error) does."""
    unlink = pathlib.Path.unlink

    def refuse(self: Path, missing_ok: bool = False) -> None:
        if self.name.endswith(".pending"):
            raise PermissionError(13, "Permission denied", str(self))
        unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(pathlib.Path, "unlink", refuse)


@pytest.mark.parametrize("first", [True, False], ids=["first publish", "later publish"])
def test_a_pending_note_that_cannot_be_removed_leaves_the_publish_done(
        hub: LocalHub, project: Path, tmp_path: Path, monkeypatch, caplog, first: bool) -> None:
    """The note is removed after the ref moved: the publish has landed, so a note that
    cannot be removed is a warning, never an error saying the revisions are as they
    were. The next publish removes the note and keeps the revision it names."""
    import logging

    if not first:
        hub.publish(REPO, project, version=1)
        project = make_variant(tmp_path / "p2", value=2).parent.parent
    with monkeypatch.context() as patched, \
            caplog.at_level(logging.WARNING, logger="kernelforge"):
        _pending_notes_stay(patched)
        rev = hub.publish(REPO, project, version=1)
    assert hub.branches(REPO) == {"v1": rev.commit}
    tmp = hub.root / REPO / "tmp"
    [note] = tmp.iterdir()
    assert note.read_text() == rev.commit + "\n"
    [said] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert said == (
        f"kernelforge: {REPO}: v1 was published at {rev.short}, but its pending note {note} "
        "could not "
        f"be removed (Permission denied); it does no harm, and the next publish, card or "
        f"status change of {REPO} removes it")
    hub.verify(REPO, rev.commit)

    make_variant(tmp_path / "p3", value=3)
    last = hub.publish(REPO, tmp_path / "p3", version=1)
    assert list(tmp.iterdir()) == []
    assert [r.commit for r in hub.log(REPO, "v1")][:2] == [last.commit, rev.commit]
    hub.verify(REPO, rev.commit)


def test_a_card_that_cannot_follow_the_build_says_the_build_was_published(
        hub: LocalHub, project: Path, tmp_path: Path, monkeypatch) -> None:
    """A publish with a card writes the build's branch, then ``main``. Where ``main``
    cannot be written after the branch moved (here the note of the branch's revision
    cannot be removed, which the card's commit tries again), the error says the build
    was published, and publishing it again with the card sets the card."""
    first = hub.publish(REPO, project, version=1)
    make_variant(tmp_path / "p2", value=2)
    with monkeypatch.context() as patched:
        _pending_notes_stay(patched)
        with pytest.raises(HubError) as err:
            hub.publish(REPO, tmp_path / "p2", version=1, card="# relu\n")
    head = hub.branches(REPO)["v1"]
    assert head != first.commit and "main" not in hub.branches(REPO)
    [note] = (hub.root / REPO / "tmp").iterdir()
    assert str(err.value) == (
        f"{REPO} v1 was published at {head[:7]}, but its card was not written to main: "
        f"writing to the hub {hub.root} failed (Permission denied: {note}); fix: make "
        f"{hub.root} writable, or publish to a hub you can write (--hub on the command "
        "line, hub= in Python), then publish it again with the card")
    assert "as they were" not in str(err.value)

    again = hub.publish(REPO, tmp_path / "p2", version=1, card="# relu\n")
    assert again.commit == head
    main = hub.branches(REPO)["main"]
    assert hub.read_file(REPO, main, "README.md") == b"# relu\n"
    assert list((hub.root / REPO / "tmp").iterdir()) == []


def _publish_without_ref(hub: LocalHub, build: Path, monkeypatch) -> str:
    """The commit of a revision a publish wrote into ``objects/`` but could not name in
    a ref (no space left), which its pending note names."""
    objects = hub.root / REPO / "objects"
    before = {p.name for p in objects.iterdir()}

    def die(path: Path, commit: str) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(_durable, "write_ref", die)
        with pytest.raises(HubError, match="No space left"):
            hub.publish(REPO, build, version=1)
    (orphan,) = {p.name for p in objects.iterdir()} - before
    return orphan


@pytest.mark.parametrize("damage", [None, "newer format", "no record"])
def test_no_revision_a_ref_reaches_is_removed_whatever_a_note_names(
        hub: LocalHub, project: Path, tmp_path: Path, damage: str | None) -> None:
    """Only a revision no ref reaches goes, whatever a pending note in ``tmp/`` names:
    not a branch's head, nor a revision behind it, nor one behind a record this version
    cannot read (a newer kernelforge's, or a damaged one), whose parent it cannot know."""
    first = hub.publish(REPO, project, version=1)
    make_variant(tmp_path / "p2", value=2)
    head = hub.publish(REPO, tmp_path / "p2", version=1)
    record = hub.commit_path(REPO, head.commit) / ".commit.json"
    if damage == "newer format":
        _writable(record)
        record.write_text(json.dumps({**json.loads(record.read_text()), "format": 2}))
    elif damage == "no record":
        record.unlink()
    tmp = hub.root / REPO / "tmp"
    for i, commit in enumerate((first.commit, head.commit)):
        (tmp / f"{i:016x}.pending").write_text(commit + "\n")
    make_variant(tmp_path / "p3", value=3)
    hub.publish(REPO, tmp_path / "p3", version=1)
    objects = hub.root / REPO / "objects"
    for commit in (first.commit, head.commit):
        assert (objects / commit / "build").is_dir(), commit
    hub.verify(REPO, first.commit)


def test_while_a_ref_cannot_be_read_the_pending_notes_wait(hub: LocalHub, project: Path,
                                                           tmp_path: Path,
                                                           monkeypatch) -> None:
    """A ref that cannot be read could name any commit: the revision a dead publish
    left stays while it is so, and so does the note that names it, so that the first
    publish after the ref is repaired removes it rather than keep it for ever."""
    hub.publish(REPO, project, version=1)
    make_variant(tmp_path / "p2", value=2)
    orphan = _publish_without_ref(hub, tmp_path / "p2", monkeypatch)
    broken = hub.root / REPO / "refs" / "tags" / "broken"
    broken.parent.mkdir()
    broken.write_text("not a commit\n")
    make_variant(tmp_path / "p3", value=3)
    hub.publish(REPO, tmp_path / "p3", version=1)
    objects, tmp = hub.root / REPO / "objects", hub.root / REPO / "tmp"
    assert (objects / orphan).is_dir()
    assert [p.read_text() for p in tmp.iterdir()] == [orphan + "\n"]
    broken.unlink()
    make_variant(tmp_path / "p4", value=4)
    last = hub.publish(REPO, tmp_path / "p4", version=1)
    assert not (objects / orphan).exists() and list(tmp.iterdir()) == []
    assert {p.name for p in objects.iterdir()} == {r.commit for r in hub.log(REPO, "v1")}
    assert hub.log(REPO, "v1")[0].commit == last.commit


def test_a_prefix_finds_older_commits_along_the_parent_chain(hub: LocalHub, project: Path,
                                                             tmp_path: Path) -> None:
    first = hub.publish(REPO, project, version=1)
    make_variant(tmp_path / "p2", value=2)
    second = hub.publish(REPO, tmp_path / "p2", version=1)
    assert second.parent == first.commit
    assert hub.resolve(REPO, first.commit[:8]) == first.commit


# --- F6: unusable hub paths, corrupt refs and records ------------------------------------


@pytest.mark.parametrize("root", ["x\0y", "a" * 300], ids=["nul", "too-long"])
def test_an_unusable_hub_path_is_a_hub_error(tmp_path: Path, project: Path,
                                             root: str) -> None:
    from kernelforge import get_kernel

    hub = LocalHub(tmp_path / root)
    said = r"the hub path .* cannot be used \(.*\); name a hub directory"
    with pytest.raises(HubError, match=f"cannot write to the hub: {said}"):
        hub.publish(REPO, project, version=1)
    for call in (hub.repos, lambda: hub.branches(REPO), lambda: hub.has_repo(REPO),
                 lambda: get_kernel(REPO, version=1, hub=hub)):
        with pytest.raises(HubError, match=said):
            call()


def test_a_hub_folder_that_cannot_be_listed_is_a_hub_error(hub: LocalHub, project: Path,
                                                           monkeypatch) -> None:
    hub.publish(REPO, project, version=1)
    real = Path.iterdir

    def iterdir(self: Path):
        if self == hub.root:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "iterdir", iterdir)
    with pytest.raises(HubError, match=f"cannot list the hub directory {hub.root} "
                                       r"\(Permission denied\); check its permissions"):
        hub.publish(REPO, project, version=1)
    with pytest.raises(HubError, match=f"cannot list the hub {hub.root}: Permission denied"):
        hub.repos()


@pytest.mark.parametrize("content", ["\u00e9\n".encode(), b"\xff\xfe", b"", b"not-a-commit"])
def test_a_corrupt_ref_is_named_with_what_to_do(hub: LocalHub, project: Path,
                                                content: bytes) -> None:
    hub.publish(REPO, project, version=1)
    ref = hub.root / "kernels-test" / "robust" / "refs" / "heads" / "v1"
    ref.write_bytes(content)
    said = (f"{ref}: corrupt ref \\(expected a 40-hex commit id, got .*\\); write into it "
            "the id of a commit under .*objects .*or remove it")
    with pytest.raises(HubError, match=said):
        hub.branches(REPO)
    with pytest.raises(HubError, match=said):  # a publish reads it as the parent
        hub.publish(REPO, project, version=1)


@pytest.mark.parametrize("change, problem", [
    ({"time": "yesterday"}, "'time' is 'yesterday', not a number"),
    ({"time": True}, "'time' is True, not a number"),
    ({"time": float("nan")}, "'time' is nan, not a number of seconds since the epoch"),
    ({"time": 1e300}, "'time' is 1e\\+300, not a number of seconds since the epoch"),
    ({"time": 10**400}, "'time' is 1000.*, not a number of seconds since the epoch"),
    ({"parent": 5}, "'parent' is 5, not a commit id or null"),
    ({"parent": "../../x"}, "'parent' is '../../x', not a commit id or null"),
    ({"files": ["build/torch-cpu/metadata.json"]}, "'files' is not a mapping"),
    ({"files": {"build/torch-cpu/metadata.json": 5}}, "'files' is not a mapping"),
])
def test_a_corrupt_commit_record_is_named_with_what_to_do(hub: LocalHub, project: Path,
                                                          change: dict, problem: str) -> None:
    rev = hub.publish(REPO, project, version=1)
    path = hub.commit_path(REPO, rev.commit) / ".commit.json"
    _writable(path)
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    said = f"{path}: corrupt commit record \\({problem}.*\\); the hub's copy of this revision"
    for call in (hub.revision, hub.variants, hub.owned):
        with pytest.raises(HubError, match=said):
            call(REPO, rev.commit)
    with pytest.raises(HubError, match=said):
        hub.log(REPO, "v1")


def test_a_corrupt_head_is_repaired_by_publishing_again(hub: LocalHub, project: Path,
                                                        tmp_path: Path) -> None:
    """The damage message says to publish again: that must work (and must not count as
    an unchanged publish), and the corrupt record must not stop a short id of another
    commit from resolving."""
    first = hub.publish(REPO, project, version=1)
    make_variant(tmp_path / "p2", value=2)
    second = hub.publish(REPO, tmp_path / "p2", version=1)
    path = hub.commit_path(REPO, second.commit) / ".commit.json"
    _writable(path)
    path.write_text(json.dumps({**json.loads(path.read_text()), "time": "yesterday"}))
    third = hub.publish(REPO, tmp_path / "p2", version=1)
    assert third.commit not in (first.commit, second.commit)
    assert third.parent == second.commit
    assert hub.fetch_variant(REPO, third.commit, "torch-cpu").owned
    assert hub.resolve(REPO, third.commit[:8]) == third.commit
    assert hub.resolve(REPO, second.commit[:8]) == second.commit  # found, damaged
    with pytest.raises(HubError, match="corrupt commit record"):
        hub.revision(REPO, second.commit)


# --- links: a hub holds folders and regular files only ----------------------------------


_LINKED = ["org", "repository", "refs", "refs/heads", "refs/heads/v1", "objects",
           "objects/<commit>", ".commit.json", "build", "build/<variant>"]


def _link_outside(hub: LocalHub, commit: str, which: str, outside: Path) -> Path:
    """Move the hub's ``which`` (a path below the repository, or its org or repository
    folder) to ``outside`` and leave a link to it in its place: the same files, reached
    through a link. Returns the link."""
    repo = hub.root / "kernels-test" / "robust"
    where = {"org": hub.root / "kernels-test", "repository": repo,
             ".commit.json": repo / "objects" / commit / ".commit.json"}.get(which)
    if where is None:
        where = repo.joinpath(*which.replace("<commit>", commit).replace(
            "<variant>", "torch-cpu").split("/"))
        if which.startswith("build"):
            where = repo / "objects" / commit / where.relative_to(repo)
    os.rename(where, outside)
    where.symlink_to(outside, target_is_directory=outside.is_dir())
    return where


@pytest.mark.parametrize("which", _LINKED)
def test_a_link_in_the_hub_is_refused_by_loads_and_kernel_info(
        hub: LocalHub, project: Path, tmp_path: Path, which: str) -> None:
    """A link on the way from the root to the variant (or to a ref or record read on
    the way) could serve code from a folder others write, which the owner mark of the
    revision would vouch for: it is refused, naming it, however the kernel is asked for."""
    from kernelforge import get_kernel, has_kernel, kernel_info

    commit = hub.publish(REPO, project, version=1).commit
    link = _link_outside(hub, commit, which, tmp_path / "outside")
    said = f"{link}: a symbolic link to {tmp_path / 'outside'} in a local hub"
    for call in (lambda: get_kernel(REPO, version=1, hub=hub),
                 lambda: get_kernel(REPO, revision=commit, hub=hub),
                 lambda: kernel_info(REPO, version=1, hub=hub)):
        with pytest.raises(HubError) as info:
            call()
        assert said in str(info.value), str(info.value)
        assert "Fix: remove the link" in str(info.value)
    assert not has_kernel(REPO, version=1, hub=hub)


@pytest.mark.parametrize("which", ["org", "repository", "objects", "refs/heads"])
def test_a_publish_writes_nothing_through_a_link_in_the_hub(
        hub: LocalHub, project: Path, tmp_path: Path, which: str) -> None:
    commit = hub.publish(REPO, project, version=1).commit
    outside = tmp_path / "outside"
    link = _link_outside(hub, commit, which, outside)
    before = sorted(p.relative_to(outside) for p in outside.rglob("*"))
    make_variant(tmp_path / "p2", value=2)
    with pytest.raises(HubError, match=f"{link}: a symbolic link"):
        hub.publish(REPO, tmp_path / "p2", version=1)
    assert sorted(p.relative_to(outside) for p in outside.rglob("*")) == before


def test_a_hub_root_that_is_a_link_loads(tmp_path: Path, project: Path) -> None:
    """The root may be a link the user made (the hub is judged where it leads)."""
    from kernelforge import get_kernel

    LocalHub(tmp_path / "real").publish(REPO, project, version=1)
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    assert get_kernel(REPO, version=1, hub=tmp_path / "linked").VALUE == 1


@pytest.mark.parametrize("mac", ["\u00e9" * 64, "\udcff", "\U0001f600"])
def test_an_owner_mark_of_other_characters_is_no_mark(hub: LocalHub, project: Path,
                                                      mac: str) -> None:
    """hmac.compare_digest raises TypeError for a str that is not ASCII: such a mark is
    none (the revision needs a signature or an allow-list entry), not a crash."""
    from kernelforge import get_kernel
    from kernelforge.errors import TrustError

    rev = hub.publish(REPO, project, version=1)
    assert hub.owned(REPO, rev.commit)
    path = hub.commit_path(REPO, rev.commit) / ".commit.json"
    _writable(path)
    record = json.loads(path.read_text())
    record["owner"]["mac"] = mac
    path.write_text(json.dumps(record))
    assert not hub.owned(REPO, rev.commit)
    with pytest.raises(TrustError, match=f"refusing to load {REPO}"):
        get_kernel(REPO, version=1, hub=hub)


# --- records written by other versions of kernelforge ----------------------------------


def test_a_commit_record_of_a_newer_format_is_refused_naming_the_upgrade(
        hub: LocalHub, project: Path) -> None:
    """A newer kernelforge sharing the hub may write records this version would misread:
    refused, naming the record and the upgrade, rather than read as format 1."""
    rev = hub.publish(REPO, project, version=1)
    path = hub.commit_path(REPO, rev.commit) / ".commit.json"
    _writable(path)
    path.write_text(json.dumps({**json.loads(path.read_text()), "format": 2, "new": [1]}))
    said = (f"{path}: this commit record is of format 2, written by a newer kernelforge "
            "\\(this version reads format 1\\); upgrade kernelforge \\(update the checkout "
            "it was installed from, then run pip install -e . there again\\) to use this "
            "revision$")
    for call in (hub.revision, hub.variants, hub.owned):
        with pytest.raises(HubError, match=said):
            call(REPO, rev.commit)
    with pytest.raises(HubError, match=said):
        hub.fetch_variant(REPO, rev.commit, "torch-cpu")


@pytest.mark.parametrize("change", [{"added-later": {"x": 1}}, {"format": None}])
def test_a_record_with_unknown_fields_or_without_a_format_is_read(
        hub: LocalHub, project: Path, change: dict) -> None:
    """Fields a newer version adds within format 1 are ignored, and a record without
    ``format`` is one of format 1."""
    rev = hub.publish(REPO, project, version=1)
    path = hub.commit_path(REPO, rev.commit) / ".commit.json"
    _writable(path)
    record = {**json.loads(path.read_text()), **change}
    path.write_text(json.dumps({k: v for k, v in record.items() if v is not None}))
    assert hub.variants(REPO, rev.commit) == ["torch-cpu"]
    assert hub.owned(REPO, rev.commit)


@pytest.mark.parametrize("value", ["2", True, 0, 1.5])
def test_a_record_whose_format_is_no_number_is_corrupt(hub: LocalHub, project: Path,
                                                       value: object) -> None:
    rev = hub.publish(REPO, project, version=1)
    path = hub.commit_path(REPO, rev.commit) / ".commit.json"
    _writable(path)
    path.write_text(json.dumps({**json.loads(path.read_text()), "format": value}))
    with pytest.raises(HubError, match=f"{path}: corrupt commit record \\('format' is "):
        hub.revision(REPO, rev.commit)
