"""The project tree a build reads and writes: which folders the source hash and the git
dirty check cover, the Python package's symlinks, files the package cannot ship (in
`check` as in `build`), `out_dir`, `depends` errors and a symlinked variant directory.
None of these tests compiles: the projects are noarch, or fail before compiling."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tracemalloc
from pathlib import Path

import pytest
from kf_testutil import copy_example, write_noarch_project

from kernelforge.build import build_project, package, source_identity
from kernelforge.build.plan import hash_sources, package_files
from kernelforge.cli import main
from kernelforge.errors import BuildError, ManifestError
from kernelforge.manifest import check_buildable, load_manifest

pytestmark = pytest.mark.usefixtures("cpu_system")


def quiet(_: str) -> None:
    pass


def content_hash(project: Path) -> str:
    return source_identity(project, load_manifest(project)).content_hash


@pytest.fixture
def relu(tmp_path: Path) -> Path:
    return copy_example(tmp_path / "relu")


# --- what the source hash covers (item 2) -------------------------------------------------


@pytest.mark.parametrize("folder", ["build", "result", ".inc", "sub/.generated"])
def test_a_header_in_a_source_folder_below_the_top_counts(relu: Path, folder: str) -> None:
    """relu_cpu/result/val.h, included by a kernel, is a source: only the project's own
    top-level build/ and result are outputs. A dot-folder below the top level is a
    source folder too (`#include ".inc/params.h"`)."""
    header = relu / "relu_cpu" / folder / "val.h"
    header.parent.mkdir(parents=True)
    header.write_text("inline float kval() { return 1.0f; }\n")
    before = content_hash(relu)
    header.write_text("inline float kval() { return 2.0f; }\n")
    assert content_hash(relu) != before


@pytest.mark.parametrize("junk", [
    "build/torch-cpu/x.py", "result/lib/x.so", ".kernelforge/obj/x.o", ".github/ci.yml",
    "relu_cpu/.ipynb_checkpoints/x-checkpoint.ipynb", "relu_cpu/.mypy_cache/x.json",
    "relu_cpu/.relu_cpu.cpp.swp", "relu_cpu/nested/__pycache__/x.cpython-311.pyc",
    "relu_cpu/x.pyc", "relu_cpu/tool-cache/x.bin",
])
def test_outputs_tool_state_and_bytecode_do_not_count(relu: Path, junk: str) -> None:
    """Left out: the top level's outputs and dot-entries, bytecode at any depth, and
    below the top level dot-files, tool dot-folders and folders tagged as caches."""
    tagged = relu / "relu_cpu" / "tool-cache"
    tagged.mkdir()
    (tagged / "CACHEDIR.TAG").write_bytes(
        b"Signature: 8a477f597d28d172789f06886806bc55\n# a tool's cache\n")
    before = content_hash(relu)
    path = relu / junk
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("changes at every run\n")
    assert content_hash(relu) == before, f"{junk} changed the uid"


def test_a_folder_with_a_wrong_cache_tag_counts(relu: Path) -> None:
    """Only the tag's signature marks a cache: a file of that name alone does not."""
    folder = relu / "relu_cpu" / "tables"
    folder.mkdir()
    (folder / "CACHEDIR.TAG").write_text("not the signature\n")
    (folder / "t.h").write_text("#define T 1\n")
    before = content_hash(relu)
    (folder / "t.h").write_text("#define T 2\n")
    assert content_hash(relu) != before


def test_files_are_hashed_in_chunks(relu: Path) -> None:
    """A large file in the project (a test fixture, a checkpoint) is not read into
    memory whole to hash it (item 10)."""
    size = 24 << 20
    with open(relu / "fixture.bin", "wb") as out:
        for _ in range(size >> 20):
            out.write(os.urandom(1 << 20))
    tracemalloc.start()
    try:
        hash_sources(relu)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < size // 4, f"hashing took {peak} bytes of memory for a {size}-byte file"


# --- the git dirty check (item 4) ---------------------------------------------------------


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com",
                           "-c", "init.defaultBranch=main", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout


def commit_all(repo: Path, message: str = "c") -> None:
    """Make ``repo`` a git repository (once) and commit everything in it."""
    if not (repo / ".git").exists():
        git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", message)


@pytest.fixture
def committed(tmp_path: Path) -> Path:
    """The relu project in a sub-folder of a git repository, committed with a test."""
    repo = tmp_path / "repo"
    project = copy_example(repo / "kernels" / "relu")
    (project / "tests").mkdir(exist_ok=True)  # the example may ship tests of its own
    (project / "tests" / "test_relu.py").write_text("def test_a():\n    pass\n")
    (repo / "NOTES.md").write_text("outside the project\n")
    commit_all(repo, "relu")
    return project


def dirty(project: Path, out_dir: Path | None = None) -> bool:
    manifest = load_manifest(project)
    sid = (source_identity(project, manifest) if out_dir is None
           else source_identity(project, manifest, out_dir=out_dir))
    assert sid.git_commit is not None
    return sid.git_dirty


def test_what_the_hash_leaves_out_does_not_make_the_project_dirty(committed: Path) -> None:
    """Running the project's tests writes __pycache__ (and pytest's cache), a build
    writes build/ and .kernelforge/, a venv may sit in the project: none is a source,
    so none marks the build _dirty and rebuilds it."""
    assert not dirty(committed)
    for path in ("tests/__pycache__/test_relu.cpython-311-pytest-8.pyc",
                 "torch-ext/relu/__pycache__/__init__.cpython-311.pyc",
                 ".pytest_cache/v/cache/lastfailed", "build/torch-cpu/_ops.py",
                 ".kernelforge/cpu.stamp.json", "env/lib/site-packages/pkg.py",
                 "env/pyvenv.cfg", "relu_cpu/.relu_cpu.cpp.swp",
                 "scratch/__pycache__/x.pyc", "relu_cpu/.ipynb_checkpoints/n.ipynb"):
        (committed / path).parent.mkdir(parents=True, exist_ok=True)
        (committed / path).write_text("x\n")
    (committed.parents[1] / "NOTES.md").write_text("edited, but outside the project\n")
    assert not dirty(committed)


@pytest.mark.parametrize("change", ["edit", "new header", "new folder", "delete",
                                    "nested build"])
def test_a_change_to_what_the_hash_covers_makes_the_project_dirty(committed: Path,
                                                                  change: str) -> None:
    source = committed / "relu_cpu" / "relu_cpu.cpp"
    if change == "edit":
        source.write_text(source.read_text() + "// edited\n")
    elif change == "new header":
        (committed / "relu_cpu" / "k.h").write_text("#define K 1\n")
    elif change == "new folder":
        (committed / "relu_cpu" / "inc" / "__pycache__").mkdir(parents=True)
        (committed / "relu_cpu" / "inc" / "k.h").write_text("#define K 1\n")
    elif change == "delete":
        (committed / "tests" / "test_relu.py").unlink()
    else:
        (committed / "relu_cpu" / "build").mkdir()
        (committed / "relu_cpu" / "build" / "k.h").write_text("#define K 1\n")
    assert dirty(committed)


@pytest.mark.parametrize("ignored", ["file", "folder"])
def test_a_file_git_ignores_that_the_hash_covers_makes_the_project_dirty(
        committed: Path, ignored: str) -> None:
    """A file that git ignores (an editor's backup, a generated header, a vendored folder)
    is not in the commit, but the uid covers it: the build is not one a checkout of that
    commit gives, so it is _dirty. What the hash leaves out stays clean when ignored."""
    (committed / ".gitignore").write_text("*~\nvendor/\n__pycache__/\n")
    (committed / "torch-ext" / "relu" / "__pycache__").mkdir()
    (committed / "torch-ext" / "relu" / "__pycache__" / "x.pyc").write_text("x\n")
    commit_all(committed.parents[1], "ignore")
    assert not dirty(committed)
    if ignored == "file":
        (committed / "relu_cpu" / "relu_cpu.cpp~").write_text("// a backup\n")
    else:
        (committed / "vendor").mkdir()
        (committed / "vendor" / "k.h").write_text("#define K 1\n")
    assert dirty(committed)


def test_a_project_git_does_not_track_is_dirty(tmp_path: Path) -> None:
    """A project put into a repository's work tree but never added: git reports it as
    one untracked folder, which holds every source."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("a repository\n")
    commit_all(repo, "readme")
    project = copy_example(repo / "relu")
    assert dirty(project)


def test_a_changed_submodule_or_linked_folder_is_dirty(tmp_path: Path) -> None:
    """git reports a submodule, or a link to a folder, as one path without a '/': a change
    there is a change to the files the hash reads through it."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "k.h").write_text("#define K 1\n")
    commit_all(lib, "lib")
    repo = tmp_path / "repo"
    project = copy_example(repo)
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "s.h").write_text("#define S 1\n")
    (project / "linked").symlink_to(tmp_path / "shared")
    git(repo, "init", "-q")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "third")
    commit_all(repo, "relu")
    assert not dirty(project)
    (project / "third" / "k.h").write_text("#define K 2\n")  # an edit in the submodule
    assert dirty(project)
    git(project / "third", "checkout", "-q", "k.h")
    assert not dirty(project)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "s.h").write_text("#define S 2\n")
    (project / "linked").unlink()
    (project / "linked").symlink_to(tmp_path / "other")  # the link retargeted
    assert dirty(project)


def test_a_project_folder_whose_name_starts_with_a_space_is_checked(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    project = copy_example(repo / " relu")
    commit_all(repo, "relu")
    assert not dirty(project)
    source = project / "relu_cpu" / "relu_cpu.cpp"
    source.write_text(source.read_text() + "// edited\n")
    assert dirty(project)


# --- out_dir inside the project (item 6) --------------------------------------------------


def test_an_out_dir_inside_the_project_is_not_a_source(tmp_path: Path) -> None:
    """build_project(out_dir=<project>/dist) twice: the second build is up to date,
    under the same namespace, and dist/ does not make a git checkout dirty."""
    project = write_noarch_project(tmp_path / "na")
    commit_all(project, "na")
    dist = project / "dist"
    (first,) = build_project(project, out_dir=dist, backends=["cpu"], progress=quiet)
    (second,) = build_project(project, out_dir=dist, backends=["cpu"], progress=quiet)
    assert not first.up_to_date and second.up_to_date
    assert second.path == dist / "torch-cpu"
    meta = json.loads((second.path / "metadata.json").read_text())
    assert not meta["provenance"]["kernel"]["dirty"]
    assert not dirty(project, out_dir=dist)
    assert dirty(project)  # without out_dir, dist/ is a new folder of the project


@pytest.mark.parametrize("where", [".", ".."])
def test_an_out_dir_holding_the_project_is_refused(tmp_path: Path, where: str) -> None:
    project = write_noarch_project(tmp_path / "na")
    with pytest.raises(BuildError, match=r"out_dir .* holds the project .*fix: write them "
                                         r"to a folder of their own"):
        build_project(project, out_dir=project / where, backends=["cpu"], progress=quiet)
    assert not (project / "torch-cpu").exists() and not (tmp_path / "torch-cpu").exists()


def test_a_build_lists_the_project_once_for_its_file_times_and_its_hash(
        tmp_path: Path, monkeypatch) -> None:
    """The sizes and times taken before the hash and the hash itself come from one walk
    of the project: in a tree of thousands of headers the walk costs about what hashing
    them does, and a no-op build did it twice. The uid is the one source_identity gives."""
    import kernelforge.build as kbuild

    project = write_noarch_project(tmp_path / "na")
    (project / "include").mkdir()
    for i in range(3):
        (project / "include" / f"h{i}.h").write_text(f"// {i}\n")
    walks: list[Path] = []
    real = kbuild.project_files

    def counting(root: Path, *args, **kwargs):
        walks.append(root)
        return real(root, *args, **kwargs)

    monkeypatch.setattr(kbuild, "project_files", counting)
    (result,) = build_project(project, backends=["cpu"], progress=quiet)
    assert not result.up_to_date and walks == [project]
    (result,) = build_project(project, backends=["cpu"], progress=quiet)
    assert result.up_to_date and walks == [project, project]
    meta = json.loads((project / "build" / "torch-cpu" / "metadata.json").read_text())
    assert meta["id"].endswith(content_hash(project)[:7])


@pytest.mark.parametrize("file", ["build", "build/sub"])
def test_an_out_dir_under_a_file_is_refused_before_anything_compiles(
        tmp_path: Path, file: str, monkeypatch) -> None:
    """build/ (or a folder on the way to out_dir) is a file: named before the compile,
    not when the first variant is written."""
    import kernelforge.build as kbuild

    project = write_noarch_project(tmp_path / "na")
    (project / "build").write_text("not a folder\n")
    monkeypatch.setattr(kbuild, "_hashed_files", None)  # reached only past the check
    with pytest.raises(BuildError, match=r"out_dir .*build is not a directory.*fix: move "
                                         r"or delete"):
        build_project(project, out_dir=project / file, backends=["cpu"], progress=quiet)
    assert (project / "build").read_text() == "not a folder\n"


def _deny_writes(monkeypatch, folder: Path) -> None:
    """Make ``folder`` one this user may not write, as far as the build can tell (root
    writes anywhere, so chmod cannot)."""
    real = os.access

    def access(path, mode, **kwargs) -> bool:
        if Path(path) == folder and mode & os.W_OK:
            return False
        return real(path, mode, **kwargs)

    monkeypatch.setattr(os, "access", access)


@pytest.mark.parametrize("made", [True, False])
def test_a_build_dir_that_cannot_be_written_is_refused_before_anything_compiles(
        tmp_path: Path, monkeypatch, made: bool) -> None:
    """A build/ another user made (a build under sudo), or a read-only project: refused
    with the fix before the compile, not with "Permission denied" about a temporary
    folder once it is done; a build that is up to date, which writes nothing, still is."""
    project = write_noarch_project(tmp_path / "na")
    (first,) = build_project(project, backends=["cpu"], progress=quiet)
    if not made:
        package._remove(project / "build")
    denied = project / "build" if made else project
    _deny_writes(monkeypatch, denied)
    if made:
        (again,) = build_project(project, backends=["cpu"], progress=quiet)
        assert again.up_to_date
    import kernelforge.build as kbuild

    monkeypatch.setattr(kbuild, "assemble_variant", None)  # reached only past the check
    fix = ("remove it if another user made it (a build run with sudo)" if made
           else "build a copy of the project in a folder you can write")
    with pytest.raises(BuildError) as info:
        build_project(project, backends=["cpu"], progress=quiet, force=True)
    assert str(info.value) == (
        f"{project / 'build'}: {denied} may not be written by this user, so no variant can "
        f"be written there; fix: make it writable (chmod u+w {denied}), or {fix}")


def test_a_build_dir_on_a_read_only_file_system_is_not_told_to_chmod(tmp_path: Path,
                                                                     monkeypatch) -> None:
    """On a read-only mount (a container's volume), chmod would fail too: the error
    says what refuses the write and the fix that works."""
    project = write_noarch_project(tmp_path / "na")
    (project / "build").mkdir()
    _deny_writes(monkeypatch, project / "build")
    real = os.statvfs

    class ReadOnly:
        def __init__(self, path) -> None:
            self.f_flag = real(path).f_flag | os.ST_RDONLY

    monkeypatch.setattr(os, "statvfs", lambda path: ReadOnly(path) if Path(path) == project
                        / "build" else real(path))
    import kernelforge.build as kbuild

    monkeypatch.setattr(kbuild, "assemble_variant", None)  # reached only past the check
    with pytest.raises(BuildError) as info:
        build_project(project, backends=["cpu"], progress=quiet)
    assert str(info.value) == (
        f"{project / 'build'}: {project / 'build'} is on a read-only file system, so no "
        "variant can be written there; fix: build a copy of the project on a writable "
        "file system")


def test_a_full_disk_while_writing_the_variant_keeps_the_old_one(tmp_path: Path,
                                                                 monkeypatch) -> None:
    import errno

    project = write_noarch_project(tmp_path / "na")
    (first,) = build_project(project, backends=["cpu"], progress=quiet)
    before = sorted(p.name for p in first.path.iterdir())

    def full(folder: Path) -> dict:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(package.digest, "hash_tree", full)
    with pytest.raises(BuildError) as info:
        build_project(project, backends=["cpu"], progress=quiet, force=True)
    assert str(info.value) == (
        f"{first.path}: writing the variant failed (No space left on device); what was "
        f"there is left as it was; fix: free space on the disk of {project / 'build'}")
    assert [p.name for p in (project / "build").iterdir()] == ["torch-cpu"]  # no leftover
    assert sorted(p.name for p in first.path.iterdir()) == before


# --- symlinks in the Python package (item 5) ----------------------------------------------


def test_a_symlinked_sub_package_is_shipped(tmp_path: Path) -> None:
    """torch-ext/na/common -> ../../shared/common: its files are copied into the variant
    as regular files (as a symlinked file is), and editing them changes the uid."""
    project = write_noarch_project(tmp_path / "na")
    shared = project / "shared" / "common"
    shared.mkdir(parents=True)
    (shared / "__init__.py").write_text("Y = 7\n")
    (project / "torch-ext" / "na" / "common").symlink_to(Path("../../shared/common"),
                                                        target_is_directory=True)
    assert [rel for rel, _ in package_files(project, "na", ["py"])] == [
        "torch-ext/na/__init__.py", "torch-ext/na/common/__init__.py"]
    (result,) = build_project(project, backends=["cpu"], progress=quiet)
    copied = result.path / "common" / "__init__.py"
    assert copied.read_text() == "Y = 7\n" and not copied.is_symlink()
    meta = json.loads((result.path / "metadata.json").read_text())
    assert "common/__init__.py" in meta["digest"]["files"]
    (shared / "__init__.py").write_text("Y = 8\n")
    (again,) = build_project(project, backends=["cpu"], progress=quiet)
    assert not again.up_to_date
    assert (again.path / "common" / "__init__.py").read_text() == "Y = 8\n"


def _check_errors(project: Path) -> str:
    with pytest.raises(ManifestError) as info:
        check_buildable(load_manifest(project))
    return str(info.value)


@pytest.mark.parametrize("link, target, says", [
    ("loop", ".", r"leads back to \S+/torch-ext/na, a folder that contains it \(a loop "
                  r"of symbolic links\), so the build cannot copy its files into the "
                  r"variant; fix: remove the link"),
    ("gone.py", "missing.py", r"is a symbolic link to missing\.py, which does not exist, "
                              r"so the variant would lack it; fix: restore its target"),
])
def test_a_package_link_that_cannot_be_shipped_is_refused_by_check_and_build(
        tmp_path: Path, link: str, target: str, says: str) -> None:
    """A link loop or a dangling link in the package is never dropped silently: build
    refuses it before writing anything, and check says the same."""
    project = write_noarch_project(tmp_path / "na")
    path = project / "torch-ext" / "na" / link
    path.symlink_to(target)
    # an editor's lock file: a dangling dot-named link, left alone
    (project / "torch-ext" / "na" / ".#__init__.py").symlink_to("user@host.123:456")
    message = rf"{path} {says}"
    assert len(re.findall(message, _check_errors(project))) == 1
    with pytest.raises(BuildError, match=message):
        build_project(project, backends=["cpu"], progress=quiet)
    assert not (project / "build").exists()


# --- files the package cannot ship: check agrees with build (item 12) ---------------------


@pytest.mark.parametrize("name, pyext, says", [
    ("_ops.py", ("py",), "would be overwritten by the generated _ops.py; fix: delete it"),
    ("metadata.json", ("py", "json"), "would be overwritten by the generated metadata.json; "
                                      "fix: rename it (and the code that reads it)"),
    ("metadata.json.sigstore", ("py", "sigstore"),
     "would be taken for the signature bundle of the variant's metadata.json; fix: rename it"),
])
def test_check_refuses_the_package_files_build_refuses(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
        pyext: tuple[str, ...], says: str) -> None:
    """kernel-builder writes torch-ext/<name>/_ops.py into the source tree: `check` says
    what `build` says about it, instead of "ok"."""
    project = write_noarch_project(tmp_path / "na")
    toml = project / "build.toml"
    toml.write_text(toml.read_text() + f"pyext = {json.dumps(list(pyext))}\n")
    clash = project / "torch-ext" / "na" / name
    clash.write_text("x = 1\n")
    assert main(["check", str(project)]) == 1
    err = capsys.readouterr().err
    assert f"{project / 'build.toml'}: {clash} {says}" in err, err
    with pytest.raises(BuildError) as info:
        build_project(project, backends=["cpu"], progress=quiet)
    assert str(info.value) == f"{clash} {says}"


def test_check_passes_a_package_file_that_is_not_shipped(tmp_path: Path) -> None:
    """metadata.json is refused only where the variant would ship it (json in pyext)."""
    project = write_noarch_project(tmp_path / "na")
    (project / "torch-ext" / "na" / "metadata.json").write_text("{}\n")
    assert check_buildable(load_manifest(project)) == []


# --- depends that kernelforge cannot resolve (item 13) ------------------------------------


def test_build_names_the_file_and_section_of_an_unresolvable_dependency(
        relu: Path) -> None:
    """`build` words an unresolvable `depends` as `check` does: build.toml, the kernel
    section's key and the fix, before anything is compiled."""
    toml = relu / "build.toml"
    text = toml.read_text()
    assert 'depends = ["torch"]' in text
    toml.write_text(text.replace('depends = ["torch"]', 'depends = ["torch", "cutlass_3_9"]',
                                 1))  # the first kernel section's: relu_cpu
    checked = _check_errors(relu)
    assert "key 'kernel.relu_cpu.depends': kernel dependency 'cutlass_3_9'" in checked
    with pytest.raises(ManifestError) as info:
        build_project(relu, backends=["cpu"], progress=quiet)
    said = str(info.value)
    assert said.startswith(f"{toml}: key 'kernel.relu_cpu.depends': kernel dependency "
                           "'cutlass_3_9' has no pinned package"), said
    assert "fix: use one of those, or remove 'cutlass_3_9'" in said
    assert said in checked
    assert not (relu / ".kernelforge" / "torch-cpu").exists()  # nothing compiled


# --- a symlinked build/<variant> (item 14) ------------------------------------------------


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "rename-aside"])
def test_a_symlinked_variant_replaced_by_a_build_leaves_no_link_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exchange: bool) -> None:
    project = write_noarch_project(tmp_path / "na")
    elsewhere = tmp_path / "elsewhere-cpu"
    elsewhere.mkdir()
    (elsewhere / "kept.txt").write_text("not the build's to delete\n")
    (project / "build").mkdir()
    (project / "build" / "torch-cpu").symlink_to(elsewhere, target_is_directory=True)
    if not exchange:
        monkeypatch.setattr(package, "_exchange", lambda a, b: False)
    (result,) = build_project(project, backends=["cpu"], progress=quiet)
    assert result.path.is_dir() and not result.path.is_symlink()
    assert sorted(p.name for p in (project / "build").iterdir()) == ["torch-cpu"]
    assert (elsewhere / "kept.txt").is_file()


@pytest.mark.parametrize("kind", ["tmp", "old"])
def test_a_leftover_link_of_a_killed_build_is_recovered(tmp_path: Path, kind: str) -> None:
    """A build killed after swapping out a symlinked variant leaves the link under a
    leftover name: the next build removes it (a staging name) or puts it back (a
    set-aside variant whose replacement never arrived), never touching its target."""
    out = tmp_path / "build"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere-cpu"
    elsewhere.mkdir()
    (elsewhere / "kept.txt").write_text("x\n")
    me = package._owner()
    dead = me[:-len(str(os.getpid()))] + "999999999"  # no such process
    name = f".torch-cpu.tmp-{dead}-ab12" if kind == "tmp" else f".torch-cpu.old-{dead}"
    (out / name).symlink_to(elsewhere, target_is_directory=True)
    (out / f".torch-cuda.tmp-{dead}-cd34").symlink_to(tmp_path / "gone")  # dangling
    done = package.recover_leftovers(out)
    assert len(done) == 2, done
    names = sorted(p.name for p in out.iterdir())
    if kind == "tmp":
        assert names == []
    else:
        assert names == ["torch-cpu"] and (out / "torch-cpu").is_symlink()
    assert (elsewhere / "kept.txt").is_file()


def test_a_top_level_build_folder_that_is_the_output_stays_out_of_the_hash(
        tmp_path: Path) -> None:
    """A build writes build/<variant>; the next build of the unchanged project is up to
    date (the variant is no source), and so is one after a source folder named build
    appears in the package."""
    project = write_noarch_project(tmp_path / "na")
    (first,) = build_project(project, backends=["cpu"], progress=quiet)
    (second,) = build_project(project, backends=["cpu"], progress=quiet)
    assert second.up_to_date and second.path == first.path
    nested = project / "torch-ext" / "na" / "build"
    nested.mkdir()
    (nested / "helpers.py").write_text("X = 1\n")
    (third,) = build_project(project, backends=["cpu"], progress=quiet)
    assert not third.up_to_date
    assert (third.path / "build" / "helpers.py").read_text() == "X = 1\n"


def test_a_project_put_under_git_after_its_build_is_built_again(tmp_path: Path) -> None:
    """A variant built outside git records no commit; once the project is committed, the
    next build is not taken as up to date, so that the variant records the commit."""
    project = write_noarch_project(tmp_path / "na")
    (first,) = build_project(project, backends=["cpu"], progress=quiet)
    assert "kernel" not in json.loads((first.path / "metadata.json").read_text())["provenance"]
    commit_all(project, "na")
    (second,) = build_project(project, backends=["cpu"], progress=quiet)
    assert not second.up_to_date
    kernel = json.loads((second.path / "metadata.json").read_text())["provenance"]["kernel"]
    assert kernel["commit"] == git(project, "rev-parse", "HEAD").strip()
    (third,) = build_project(project, backends=["cpu"], progress=quiet)
    assert third.up_to_date
