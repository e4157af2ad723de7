"""What the source hash covers: it decides the op namespace uid and the up-to-date check,
so every file a build can read must change it, and nothing the build writes may."""

from __future__ import annotations

from pathlib import Path

import pytest
from kf_testutil import copy_example

from kernelforge.build import source_identity
from kernelforge.manifest import load_manifest


def content_hash(project: Path) -> str:
    return source_identity(project, load_manifest(project)).content_hash


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_example(tmp_path / "relu")


def test_a_header_in_a_symlinked_directory_counts(tmp_path: Path, project: Path) -> None:
    shared = tmp_path / "shared_headers"
    shared.mkdir()
    (shared / "k.h").write_text("#define K 1\n")
    (project / "shared").symlink_to(shared, target_is_directory=True)
    before = content_hash(project)
    (shared / "k.h").write_text("#define K 2\n")
    assert content_hash(project) != before


@pytest.mark.parametrize("folder", [".ipynb_checkpoints", ".pytest_cache", ".venv",
                                    "__pycache__"])
def test_folders_with_ignored_names_do_not_count_unless_listed(project: Path, folder: str
                                                                ) -> None:
    """Bytecode and the dot-folders of tools are left out at any depth (editor and tool
    state must not change the uid), but an include directory the manifest names is
    hashed even there. (Source folders named build or result, and other dot-folders,
    count below the top level: tests/test_build_tree.py.)"""
    nested = project / "relu_cpu" / folder
    nested.mkdir()
    (nested / "k.h").write_text("#define K 1\n")
    before = content_hash(project)
    (nested / "k.h").write_text("#define K 2\n")
    assert content_hash(project) == before
    toml = project / "build.toml"
    toml.write_text(toml.read_text().replace(
        "[kernel.relu_cpu]\n", f'[kernel.relu_cpu]\ninclude = ["relu_cpu/{folder}"]\n'))
    listed = content_hash(project)
    (nested / "k.h").write_text("#define K 3\n")
    assert content_hash(project) != listed


def test_the_roots_own_outputs_do_not_count(project: Path) -> None:
    before = content_hash(project)
    for folder in ("build", ".kernelforge", "result", ".venv", ".git"):
        (project / folder).mkdir()
        (project / folder / "x.txt").write_text("output\n")
    (project / "relu_cpu" / "__pycache__").mkdir()
    (project / "relu_cpu" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    (project / ".scratch").write_text("editor state\n")
    (project / "relu_cpu" / ".clang-format").write_text("BasedOnStyle: LLVM\n")
    assert content_hash(project) == before


def test_include_dot_does_not_hash_the_builds_own_outputs(project: Path) -> None:
    """`include = ["."]` names the whole project: its build/ and .kernelforge/ are still
    outputs, so building does not change the uid."""
    toml = project / "build.toml"
    toml.write_text(toml.read_text().replace("[kernel.relu_cpu]\n",
                                             '[kernel.relu_cpu]\ninclude = ["."]\n'))
    before = content_hash(project)
    for folder in ("build", ".kernelforge"):
        (project / folder / "v").mkdir(parents=True)
        (project / folder / "v" / "x.so").write_bytes(b"\0")
    assert content_hash(project) == before


def test_an_unreadable_file_is_an_error_not_left_out(project: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelforge.errors import BuildError

    secret = project / "relu_cpu" / "secret.h"
    secret.write_text("#define K 1\n")
    real_open = Path.open

    def open_(self: Path, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if self == secret:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "open", open_)
    with pytest.raises(BuildError, match="cannot read .*secret.h .*Permission denied"):
        content_hash(project)


def test_a_listed_include_directory_counts_wherever_it_is(project: Path) -> None:
    """An include directory the manifest names is hashed even at a name the tree walk
    leaves out (here a dot-folder at the root)."""
    include = project / ".generated"
    include.mkdir()
    (include / "k.h").write_text("#define K 1\n")
    toml = project / "build.toml"
    text = toml.read_text()
    assert "[kernel.relu_cpu]\n" in text
    toml.write_text(text.replace("[kernel.relu_cpu]\n",
                                 '[kernel.relu_cpu]\ninclude = [".generated"]\n'))
    before = content_hash(project)
    (include / "k.h").write_text("#define K 2\n")
    assert content_hash(project) != before


def test_a_symlink_loop_is_not_followed_around(project: Path) -> None:
    """Following symlinks stops at a link back to a folder being walked."""
    before = content_hash(project)
    (project / "relu_cpu" / "loop").symlink_to(project, target_is_directory=True)
    assert content_hash(project) == before


def test_the_hash_of_an_unchanged_project_is_stable(project: Path, tmp_path: Path) -> None:
    """The same files give the same uid in another folder (the walk order is fixed)."""
    other = copy_example(tmp_path / "elsewhere" / "relu")
    assert content_hash(project) == content_hash(other)
    assert source_identity(project).content_hash == content_hash(project)


@pytest.mark.parametrize("where", ["build/helpers.py", "result/__init__.py", ".cfg/x.py",
                                   ".hidden.py"])
def test_every_file_of_the_shipped_package_counts(project: Path, where: str) -> None:
    """The build copies every pyext file of torch-ext/<name>/ into the variant, in folders
    the tree walk leaves out too; each one changes the uid."""
    target = project / "torch-ext" / "relu" / where
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("value = 1\n")
    before = content_hash(project)
    target.write_text("value = 2\n")
    assert content_hash(project) != before


def test_files_the_package_does_not_ship_are_left_out_as_before(project: Path) -> None:
    before = content_hash(project)
    pkg = project / "torch-ext" / "relu"
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (pkg / ".mypy_cache").mkdir()
    (pkg / ".mypy_cache" / "x.json").write_text("{}\n")  # not a pyext file
    assert content_hash(project) == before


@pytest.mark.parametrize("folder", ["build", ".cfg", "result", "__nested__/.d"])
def test_every_file_under_a_listed_include_directory_counts(project: Path, folder: str
                                                           ) -> None:
    """`include = ["include"]` makes include/build/params.h reachable as
    "build/params.h": it is hashed though the tree walk leaves such folders out."""
    nested = project / "include" / folder
    nested.mkdir(parents=True)
    (nested / "params.h").write_text("#define SCALE 1\n")
    toml = project / "build.toml"
    toml.write_text(toml.read_text().replace("[kernel.relu_cpu]\n",
                                             '[kernel.relu_cpu]\ninclude = ["include"]\n'))
    before = content_hash(project)
    (nested / "params.h").write_text("#define SCALE 2\n")
    assert content_hash(project) != before


@pytest.mark.parametrize("marker", ["pyvenv.cfg", "conda-meta/history"])
def test_a_python_environment_in_the_project_does_not_count(project: Path, tmp_path: Path,
                                                            marker: str) -> None:
    """`python -m venv venv` (or a conda prefix) inside the project: installing a package
    there must not change the uid, nor make a no-op build hash the environment."""
    before = content_hash(project)
    for env in (project / "venv", tmp_path / "outside-env"):
        (env / marker).parent.mkdir(parents=True, exist_ok=True)
        (env / marker).write_text("home = /usr/bin\n")
        (env / "lib" / "site-packages").mkdir(parents=True)
        (env / "lib" / "site-packages" / "pkg.py").write_text("x = 1\n")
    (project / "linked-env").symlink_to(tmp_path / "outside-env", target_is_directory=True)
    assert content_hash(project) == before
    (project / "venv" / "lib" / "site-packages" / "other.py").write_text("y = 2\n")
    assert content_hash(project) == before


@pytest.mark.parametrize("junk", [".pytest_cache/v/cache/lastfailed", ".mypy_cache/3.11/x.json",
                                  ".idea/workspace.xml", "result/lib/foo.so",
                                  "csrc/.relu.cpp.swp"])
def test_include_dot_is_the_tree_walk_not_every_file(project: Path, junk: str) -> None:
    """``include = ["."]`` lists the project folder, which the tree walk covers already:
    tool caches, IDE files and build outputs there do not count."""
    toml = project / "build.toml"
    toml.write_text(toml.read_text().replace("[kernel.relu_cpu]\n",
                                             '[kernel.relu_cpu]\ninclude = ["."]\n'))
    before = content_hash(project)
    path = project / junk
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")
    assert content_hash(project) == before, f"{junk} changed the uid"


def test_a_package_file_the_variant_does_not_ship_still_counts(project: Path) -> None:
    """torch-ext/relu/table.h is not in pyext, so the variant leaves it out (the build
    says so), yet the binding can `#include "relu/table.h"`: like every file of the
    project tree, it changes the uid."""
    table = project / "torch-ext" / "relu" / "table.h"
    table.write_text("#define SCALE 1\n")
    before = content_hash(project)
    table.write_text("#define SCALE 2\n")
    assert content_hash(project) != before
