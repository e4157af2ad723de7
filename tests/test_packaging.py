"""kernelforge as a package index serves it: the wheel and the sdist built from this
checkout hold every file of the package (among them those it reads at run time: the
bundled example that ``init`` and ``demo`` copy, ``registration.h``, ``py.typed``), no
leftovers of a build of the example, the ``kernelforge`` command, and the metadata that
``pyproject.toml`` declares.

The builds call setuptools' build backend as pip does, with this environment's setuptools
(no network, no build isolation), on a copy of the sources: setuptools keeps a ``build/``
folder between builds of one tree, whose stale copies would hide a file the package data
no longer names.
"""

from __future__ import annotations

import configparser
import email.parser
import importlib
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from email.message import Message
from importlib import metadata
from pathlib import Path

import pytest
from kf_testutil import REPO
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.version import Version

import kernelforge
from kernelforge._parse import toml_loads

pytestmark = pytest.mark.slow

PACKAGE = REPO / "src" / "kernelforge"
#: The files beside the package that building it reads.
PROJECT_FILES = ("pyproject.toml", "README.md", "MANIFEST.in", "LICENSE")
#: What building or running the bundled example in place leaves in the package: a variant,
#: the build's work folder, bytecode. None of it belongs in a distribution.
LEFTOVERS = ("examples/relu/build/torch213-cxx11-cpu-x86_64-linux/_relu_cpu_0123abc.abi3.so",
             "examples/relu/build/torch213-cxx11-cpu-x86_64-linux/metadata.json",
             "examples/relu/.kernelforge/cpu.stamp.json",
             "examples/relu/torch-ext/relu/__pycache__/__init__.cpython-311.pyc",
             "__pycache__/cli.cpython-311.pyc")
#: Build a distribution with the PEP 517 hook named by argv[1] into the folder argv[2].
_BUILD = ("import sys\nfrom setuptools import build_meta\n"
          "getattr(build_meta, sys.argv[1])(sys.argv[2])")


def _not_package_files(directory: str, names: list[str]) -> set[str]:
    """``shutil.copytree``'s ignore: caches, and each example's build outputs."""
    ignored = {n for n in names if n == "__pycache__" or n.endswith(".pyc")}
    if Path(directory).parent == PACKAGE / "examples":
        ignored |= {n for n in names if n in ("build", ".kernelforge")}
    return ignored


def _files(root: Path) -> set[str]:
    """The files under ``root``, as ``/``-separated paths relative to it."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _build(hook: str, source: Path, out: Path) -> Path:
    """The distribution ``hook`` (``build_wheel``, ``build_sdist``) builds from the project
    at ``source`` into the new folder ``out``."""
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", _BUILD, hook, str(out)], cwd=source, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{hook} failed:\n{proc.stdout}\n{proc.stderr}"
    (built,) = out.iterdir()
    return built


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the project's build inputs, with the leftovers of an in-place build of
    the example planted in its package."""
    have = Version(metadata.version("setuptools"))
    if have < Version("77"):
        pytest.skip(f"building kernelforge needs setuptools >= 77 (pyproject.toml's "
                    f"build-system), this environment has {have}")
    root = tmp_path_factory.mktemp("source")
    for name in PROJECT_FILES:
        shutil.copy2(REPO / name, root / name)
    shutil.copytree(PACKAGE, root / "src" / "kernelforge", ignore=_not_package_files)
    # setuptools adds tests/test*.py to an sdist unless told otherwise
    shutil.copytree(REPO / "tests", root / "tests", ignore=_not_package_files)
    for rel in LEFTOVERS:
        path = root / "src" / "kernelforge" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"left by a build\n")
    return root


@pytest.fixture(scope="module")
def package_files(source: Path) -> set[str]:
    """Every file of ``src/kernelforge`` but caches and build outputs."""
    return _files(source / "src" / "kernelforge") - set(LEFTOVERS)


@pytest.fixture(scope="module")
def wheel(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    """The wheel built from ``source``, open for reading."""
    with zipfile.ZipFile(_build("build_wheel", source, tmp_path_factory.mktemp("w") / "d")) as z:
        yield z


def _package_members(names: list[str], prefix: str) -> set[str]:
    """The files among an archive's ``names`` under ``prefix``, relative to it."""
    return {n[len(prefix):] for n in names if n.startswith(prefix) and not n.endswith("/")}


def _metadata(whl: zipfile.ZipFile, name: str) -> str:
    """The text of the wheel's ``.dist-info/<name>``."""
    return whl.read(f"kernelforge-{kernelforge.__version__}.dist-info/{name}").decode()


def test_wheel_holds_every_file_of_the_package_and_no_leftovers(
        wheel: zipfile.ZipFile, package_files: set[str]) -> None:
    got = _package_members(wheel.namelist(), "kernelforge/")
    assert not package_files - got, f"missing from the wheel: {sorted(package_files - got)}"
    assert not got - package_files, f"not files of the package: {sorted(got - package_files)}"


def test_wheel_holds_what_the_package_reads_at_run_time(
        wheel: zipfile.ZipFile, package_files: set[str]) -> None:
    """The folders the code opens beside itself, named here by the modules' own constants
    (so one moved is still checked), are in the wheel whole."""
    from kernelforge import demo, scaffold
    from kernelforge.build import plan

    here = Path(kernelforge.__file__).parent
    got = _package_members(wheel.namelist(), "kernelforge/")
    for path in (demo.EXAMPLE, scaffold.TEMPLATE, plan.DATA_DIR):
        rel = path.relative_to(here).as_posix()
        want = {f for f in package_files if f.startswith(f"{rel}/")}
        assert want, f"{rel}: no files in the source tree"
        assert want <= got, f"{rel}: missing from the wheel: {sorted(want - got)}"
    assert {"py.typed", "examples/relu/build.toml", "build/data/registration.h"} <= got


def test_wheel_declares_the_kernelforge_command(wheel: zipfile.ZipFile) -> None:
    scripts = toml_loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    entry_points = configparser.ConfigParser()
    entry_points.read_string(_metadata(wheel, "entry_points.txt"))
    assert dict(entry_points["console_scripts"]) == scripts == {
        "kernelforge": "kernelforge.__main__:main"}
    module, function = scripts["kernelforge"].split(":")
    assert callable(getattr(importlib.import_module(module), function))


def _with_extra(requirement: str, extra: str) -> str:
    """``requirement`` as metadata lists it for ``extra``: with the extra in its marker."""
    req = Requirement(requirement)
    wanted = f'extra == "{extra}"'
    req.marker = Marker(wanted if req.marker is None else f"({req.marker}) and {wanted}")
    return str(req)


def test_wheel_metadata_is_what_pyproject_declares(wheel: zipfile.ZipFile) -> None:
    project = toml_loads((REPO / "pyproject.toml").read_text())["project"]
    meta: Message = email.parser.Parser().parsestr(_metadata(wheel, "METADATA"))
    assert (meta["Name"], meta["Version"]) == ("kernelforge", kernelforge.__version__)
    assert meta["Summary"] == project["description"]
    assert meta["Requires-Python"] == project["requires-python"]
    assert meta["License-Expression"] == project["license"]
    assert meta.get_all("Classifier") == project["classifiers"]
    assert meta["Keywords"].split(",") == project["keywords"]
    assert meta["Description-Content-Type"] == "text/markdown"
    assert str(meta.get_payload()).strip() == (REPO / "README.md").read_text().strip()
    extras = project["optional-dependencies"]
    assert sorted(meta.get_all("Provides-Extra", [])) == sorted(extras)
    want = {str(Requirement(d)) for d in project["dependencies"]}
    want |= {_with_extra(d, extra) for extra, deps in extras.items() for d in deps}
    got = {str(Requirement(d)) for d in meta.get_all("Requires-Dist", [])}
    assert got == want
    assert "tomli>=2.0; python_version < \"3.11\"" in got
    # the licence the expression names ships as its text
    assert meta.get_all("License-File") == ["LICENSE"]
    assert _metadata(wheel, "licenses/LICENSE") == (REPO / "LICENSE").read_text()


def test_installed_wheel_runs_init_and_check_outside_the_checkout(
        wheel: zipfile.ZipFile, tmp_path: Path) -> None:
    """The package unpacked as pip installs a pure-Python wheel, alone on the path ahead of
    this checkout's, makes a project from its bundled example and checks it."""
    site = tmp_path / "site"
    wheel.extractall(site)
    work = tmp_path / "work"
    work.mkdir()
    run = ("import sys, kernelforge\nfrom kernelforge.__main__ import main\n"
           "print(kernelforge.__file__)\nsys.argv[0] = 'kernelforge'\n"
           "for args in (['init', 'my-relu'], ['check', 'my-relu']):\n"
           "    sys.argv[1:] = args\n    if main():\n        sys.exit(f'{args} failed')\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-c", run], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0] == str(site / "kernelforge" / "__init__.py")
    assert "my-relu/build.toml: ok" in proc.stdout
    assert (work / "my-relu" / "torch-ext" / "my_relu" / "__init__.py").is_file()
    assert (work / "my-relu" / "my_relu_cuda" / "my_relu_cuda.cu").is_file()


def test_sdist_builds_the_same_wheel_and_ships_no_partial_test_suite(
        source: Path, package_files: set[str], tmp_path: Path) -> None:
    """pip builds from the sdist where no wheel fits: it must hold the whole package, and
    not the few test files setuptools adds by default without the helpers they import."""
    sdist = _build("build_sdist", source, tmp_path / "sdist")
    top = f"kernelforge-{kernelforge.__version__}/"
    with tarfile.open(sdist) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
        # the "data" filter where this Python has it (3.10.12, 3.11.4 and later)
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(tmp_path / "unpacked", **safe)  # type: ignore[arg-type]
    assert _package_members(names, f"{top}src/kernelforge/") == package_files
    assert {f"{top}{n}" for n in PROJECT_FILES} <= set(names)
    assert not [n for n in names if n.startswith(f"{top}tests")]
    rebuilt = _build("build_wheel", tmp_path / "unpacked" / top, tmp_path / "wheel")
    with zipfile.ZipFile(rebuilt) as whl:
        assert _package_members(whl.namelist(), "kernelforge/") == package_files
