"""A locked load answers for what the lock file pins at the time of the call: the
module a repeated call returns is the one of the file's current content and location."""

from __future__ import annotations

from pathlib import Path

import pytest
from kf_sharing import isolate, make_variant, uid

from kernelforge import loader
from kernelforge.errors import IntegrityError
from kernelforge.hub import LocalHub
from kernelforge.lock import download_locked, lock_project

pytestmark = pytest.mark.usefixtures("cpu_system")

REPO = "kernels-test/relu"


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path: Path) -> dict[str, Path]:
    return isolate(monkeypatch, tmp_path)


def _publish(hub: LocalHub, root: Path, version: int) -> str:
    make_variant(root, "torch-cpu", version=version, module_id=uid(f"v{version}"),
                 value=version)
    return hub.publish(REPO, root, version=version).commit


def _project(root: Path, version: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(
        f'[tool.kernelforge.dependencies]\n"{REPO}" = {version}\n')
    return root


def _two_locked_projects(tmp_path: Path, env) -> tuple[Path, Path]:
    """Versions 1 and 2 published, and two projects, ``one`` and ``two``, whose locks
    pin them."""
    hub = LocalHub(env["hub"])
    _publish(hub, tmp_path / "b1", 1)
    _publish(hub, tmp_path / "b2", 2)
    one = _project(tmp_path / "one", 1)
    two = _project(tmp_path / "two", 2)
    lock_project(one)
    lock_project(two)
    return one, two


@pytest.mark.parametrize("load", [loader.get_locked_kernel, loader.load_kernel],
                         ids=["get_locked_kernel", "load_kernel"])
def test_a_lock_path_under_the_home_directory_is_read_there(
        tmp_path: Path, env, monkeypatch, load) -> None:
    """'~' names the home directory, as in hub=: the file or project there is read, and
    the lock is remembered by where it is."""
    from kernelforge.lock import download_locked

    monkeypatch.setenv("HOME", str(tmp_path))
    _two_locked_projects(tmp_path, env)
    assert load(REPO, lockfile="~/one/kernelforge.lock").VALUE == 1
    assert load(REPO, lockfile="~/two").VALUE == 2
    assert loader.kernel_info(REPO, lockfile="~/two").version == 2
    assert [r for r, _v, _p in download_locked("~/one")] == [REPO]


@pytest.mark.parametrize("load", [loader.get_locked_kernel, loader.load_kernel],
                         ids=["get_locked_kernel", "load_kernel"])
def test_a_relative_lock_path_in_another_directory_loads_that_projects_pin(
        tmp_path: Path, env, monkeypatch, load) -> None:
    one, two = _two_locked_projects(tmp_path, env)
    monkeypatch.chdir(one)
    assert load(REPO, lockfile="kernelforge.lock").VALUE == 1
    monkeypatch.chdir(two)
    assert load(REPO, lockfile="kernelforge.lock").VALUE == 2
    monkeypatch.chdir(one)  # and back: the first module again, not a new import
    first = load(REPO, lockfile="kernelforge.lock")
    assert first.VALUE == 1 and load(REPO, lockfile=one / "kernelforge.lock") is first


#: What an empty hub= is refused with, up to the default it names.
EMPTY_HUB = ("hub: an empty path is not a hub (it would mean the current directory); pass a "
             "hub directory ('.' for the current directory), 'hf' for the Hugging Face Hub, "
             "or nothing (None in Python) for the default: ")


@pytest.mark.parametrize("blank", ["", " "])
def test_an_empty_hub_names_the_default_of_the_call_it_is_given_to(
        tmp_path: Path, env, blank: str) -> None:
    """``hub=""`` is refused, and the refusal says what leaving it out gives this call: a
    load (or a lock, which pins what a load takes) falls back to the Hugging Face Hub, a
    locked load takes the hub the lock records; neither is a publish's default, the
    local hub alone."""
    one, _two = _two_locked_projects(tmp_path, env)
    loads = "$KERNELFORGE_HUB, else the local hub when it holds the repository, else the " \
        "Hugging Face Hub"
    locked = "the kind of hub the lock records for each kernel (a kernels.lock records none"
    for call, default in [
            (lambda: loader.get_kernel(REPO, hub=blank), loads),
            (lambda: loader.has_kernel(REPO, hub=blank), loads),
            (lambda: loader.kernel_info(REPO, hub=blank), loads),
            (lambda: lock_project(one, hub=blank), loads),
            (lambda: loader.get_locked_kernel(REPO, lockfile=one, hub=blank), locked),
            (lambda: loader.load_kernel(REPO, lockfile=one, hub=blank), locked),
            (lambda: loader.kernel_info(REPO, lockfile=one, hub=blank), locked),
            (lambda: download_locked(one, hub=blank), locked)]:
        with pytest.raises(ValueError) as refused:
            call()
        assert str(refused.value).startswith(EMPTY_HUB + default), str(refused.value)
        assert "the local hub in the user cache" not in str(refused.value)


@pytest.mark.parametrize("blank", ["", " "])
def test_an_empty_lock_path_is_refused_not_read_as_the_current_directory(
        tmp_path: Path, env, monkeypatch, capsys, blank: str) -> None:
    """``lockfile=os.environ.get("LOCK", "")`` with the variable unset loaded the lock of
    whatever directory the process ran in. Refused as ``hub=""`` is, naming the argument;
    ``"."`` (and ``kernelforge download`` with no PATH) still mean the current directory."""
    from kernelforge.cli import main
    from kernelforge.lock import download_locked

    one, _two = _two_locked_projects(tmp_path, env)
    monkeypatch.chdir(one)  # where an empty path would find a lock
    refused = r"lockfile: an empty path is not a lock file \(it would mean the current directory\)"
    for call in (lambda: loader.get_locked_kernel(REPO, lockfile=blank),
                 lambda: loader.load_kernel(REPO, lockfile=blank),
                 lambda: loader.kernel_info(REPO, lockfile=blank),
                 lambda: download_locked(blank)):
        with pytest.raises(ValueError, match=refused):
            call()
    for argv in (["info", REPO, "--lock", blank], ["download", blank]):
        with pytest.raises(SystemExit) as usage:
            main(argv)
        assert usage.value.code == 2
        err = capsys.readouterr().err
        assert f": {blank!r}: an empty path is not a lock file" in err, err
    assert loader.get_locked_kernel(REPO, lockfile=".").VALUE == 1
    assert loader.kernel_info(REPO, lockfile=".").version == 1
    assert main(["download"]) == 0
    assert f"{REPO} torch-cpu" in capsys.readouterr().out


def test_a_lock_path_through_a_link_and_dot_dot_loads_the_file_it_names(
        tmp_path: Path, env) -> None:
    """``links/deep/../kernelforge.lock`` names the lock beside the folder the link
    ``deep`` points into, as the system reads the path; the load must be the one that
    file pins, not the module of ``links/kernelforge.lock`` (what removing ``..`` from
    the text gives)."""
    import shutil

    one, two = _two_locked_projects(tmp_path, env)
    (two / "sub").mkdir()
    links = tmp_path / "links"
    links.mkdir()
    shutil.copy(one / "kernelforge.lock", links / "kernelforge.lock")
    (links / "deep").symlink_to(two / "sub")
    assert loader.get_locked_kernel(REPO, lockfile=links / "kernelforge.lock").VALUE == 1
    through = f"{links}/deep/../kernelforge.lock"
    assert loader.get_locked_kernel(REPO, lockfile=through).VALUE == 2


@pytest.mark.parametrize("given", ["lock file", "project directory"])
def test_a_lock_written_again_loads_its_new_pin(tmp_path: Path, env, given: str) -> None:
    hub = LocalHub(env["hub"])
    _publish(hub, tmp_path / "b1", 1)
    root = _project(tmp_path / "p", 1)
    written = lock_project(root).path
    lock = written if given == "lock file" else root
    assert loader.get_locked_kernel(REPO, lockfile=lock).VALUE == 1
    _publish(hub, tmp_path / "b2", 2)
    _project(root, 2)
    lock_project(root)
    assert loader.get_locked_kernel(REPO, lockfile=lock).VALUE == 2


def test_kernel_info_refuses_a_version_beside_a_lock_file(tmp_path: Path, env) -> None:
    hub = LocalHub(env["hub"])
    _publish(hub, tmp_path / "b1", 1)
    lock = lock_project(_project(tmp_path / "p", 1)).path
    for selector in ({"version": 2}, {"revision": "v2"}):
        with pytest.raises(ValueError, match="lockfile: the lock file decides the revision"):
            loader.kernel_info(REPO, lockfile=lock, **selector)
    assert loader.kernel_info(REPO, lockfile=lock).version == 1


def test_info_of_a_lock_shows_the_branch_it_records(tmp_path: Path, env, capsys) -> None:
    """``kernelforge info REPO --lock FILE`` shows the branch the lock records (it showed
    ``-``), and kernel_info says it too."""
    import json

    from kernelforge.cli import main

    hub = LocalHub(env["hub"])
    _publish(hub, tmp_path / "b1", 1)
    lock = lock_project(_project(tmp_path / "p", 1)).path
    assert json.loads(lock.read_text())["kernels"][REPO]["branch"] == "v1"
    assert loader.kernel_info(REPO, lockfile=lock).branch == "v1"
    assert main(["info", REPO, "--lock", str(lock)]) == 0
    assert "branch:     v1\n" in capsys.readouterr().out


def test_info_of_a_lock_unlike_the_local_hubs_files_names_the_lock_not_damage(
        tmp_path: Path, env) -> None:
    """A lock whose digests differ from an intact local hub's files (edited, or written
    for other files) is what ``kernelforge info --lock`` names, as the load does: the
    hub's copy is not damaged, and publishing again would not help. A copy changed in
    the hub is still its damage."""
    import json

    hub = LocalHub(env["hub"])
    commit = _publish(hub, tmp_path / "b1", 1)
    lock = lock_project(_project(tmp_path / "p", 1)).path
    doc = json.loads(lock.read_text())
    doc["kernels"][REPO]["variants"]["torch-cpu"]["files"]["helper.py"] = "AAAA"
    lock.write_text(json.dumps(doc))
    said = loader.kernel_info(REPO, lockfile=lock).trust
    assert said.startswith("trust: refused") and "changed: helper.py" in said, said
    assert f"differ from those {lock} pins" in said, said
    assert "damaged" not in said, said
    # the load and the download say the same: the lock file differs, not the hub's copy
    for call in (lambda: loader.load_kernel(REPO, lockfile=lock),
                 lambda: download_locked(lock)):
        with pytest.raises(IntegrityError) as info:
            call()
        said = str(info.value)
        assert f"differ from those {lock} pins" in said and "damaged" not in said, said
    lock = lock_project(_project(tmp_path / "p2", 1)).path
    vdir = hub.variant_path(REPO, commit, "torch-cpu")
    (vdir / "helper.py").chmod(0o644)
    (vdir / "helper.py").write_text("evil = 1\n")
    said = loader.kernel_info(REPO, lockfile=lock).trust
    assert "the hub's copy of this revision is damaged" in said, said


def test_a_locked_load_reads_no_branch_from_the_branch_the_lock_records(
        tmp_path: Path, env) -> None:
    """The lock's branch is shown, not judged: branch v1 moved to a build published as
    version 2 is refused by an unpinned load and by ``kernelforge lock`` (which makes the
    check a locked load does not), and a lock that records branch v1 for that build all
    the same (written by hand, or before locking made the check) loads what it pins (the
    lock pins the bytes)."""
    import json

    from kernelforge.errors import TrustError

    hub = LocalHub(env["hub"])
    make_variant(tmp_path / "b1", "torch-cpu", version=1, module_id=uid("br1"), value=1)
    hub.publish(REPO, tmp_path / "b1", version=1)
    make_variant(tmp_path / "b2", "torch-cpu", version=2, module_id=uid("br2"), value=2)
    v2 = hub.publish(REPO, tmp_path / "b2", version=2).commit
    (hub.root / REPO / "refs" / "heads" / "v1").write_text(v2 + "\n")
    with pytest.raises(TrustError, match="branch v1 serves a build published by you as "
                       "version 2"):
        loader.get_kernel(REPO, version=1)
    with pytest.raises(TrustError, match="branch v1 serves a build published by you as "
                       "version 2 .* refusing to lock it"):
        lock_project(_project(tmp_path / "p", 1))
    lock = lock_project(_project(tmp_path / "p", 2)).path
    doc = json.loads(lock.read_text())
    doc["kernels"][REPO].update(branch="v1", requested={"version": 1})
    lock.write_text(json.dumps(doc))
    assert loader.kernel_info(REPO, lockfile=lock).branch == "v1"
    assert loader.get_locked_kernel(REPO, lockfile=lock).VALUE == 2


# --- lockfile=None: the lock in the calling package's installed metadata -----------------


def _install(site: Path, package: str, dist: str, top_level: str, lock: Path | None,
             record: bool = False) -> None:
    """Lay out in ``site`` what pip installs for the distribution ``dist``: the package
    folder ``package`` (``a/b`` for a portion of a namespace package), whose ``load``
    calls the loader function it is given with ``lockfile=None``, and a ``.dist-info``
    folder holding ``lock`` under its own name (and a RECORD of the files, if asked)."""
    (site / package).mkdir(parents=True)
    (site / package / "__init__.py").write_text(
        "def load(fn, repo_id):\n    return fn(repo_id, lockfile=None)\n")
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "top_level.txt").write_text(f"{top_level}\n")
    if lock is not None:
        (info / lock.name).write_bytes(lock.read_bytes())
    if record:
        (info / "RECORD").write_text(f"{package}/__init__.py,,\n{info.name}/RECORD,,\n")


def _installed_package(site: Path, lock: Path | None, monkeypatch) -> object:
    """Install a package (a unique name) into ``site`` (:func:`_install`), put ``site``
    on ``sys.path`` and import it."""
    import importlib
    import uuid

    name = f"kf_installed_{uuid.uuid4().hex[:8]}"
    _install(site, name, name, name, lock)
    monkeypatch.syspath_prepend(str(site))
    return importlib.import_module(name)


@pytest.mark.parametrize("load", [loader.get_locked_kernel, loader.load_kernel],
                         ids=["get_locked_kernel", "load_kernel"])
@pytest.mark.parametrize("table", ["kernelforge", "kernels"])
def test_lockfile_none_loads_what_the_calling_packages_installed_lock_pins(
        tmp_path: Path, env, monkeypatch, load, table: str) -> None:
    """As in Hugging Face's kernels: an installed package loads the kernels it locked
    with lockfile=None, from the kernels.lock (or kernelforge.lock) in its metadata, not
    the newest version; a reinstall with a new lock loads what that one pins."""
    hub = LocalHub(env["hub"])
    _publish(hub, tmp_path / "b1", 1)
    _publish(hub, tmp_path / "b2", 2)
    root = tmp_path / "project"
    root.mkdir()
    (root / "pyproject.toml").write_text(f'[tool.{table}.dependencies]\n"{REPO}" = 1\n')
    written = lock_project(root)
    lock = written.path if table == "kernelforge" else written.hf_path
    assert lock is not None and lock.name == f"{table}.lock"
    package = _installed_package(tmp_path / "site", lock, monkeypatch)
    assert package.load(load, REPO).VALUE == 1  # type: ignore[attr-defined]
    (root / "pyproject.toml").write_text(f'[tool.{table}.dependencies]\n"{REPO}" = 2\n')
    written = lock_project(root)
    lock = written.path if table == "kernelforge" else written.hf_path
    info = next((tmp_path / "site").glob("*.dist-info"))
    (info / lock.name).write_bytes(lock.read_bytes())  # the package, reinstalled
    assert package.load(load, REPO).VALUE == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize("load", [loader.get_locked_kernel, loader.load_kernel],
                         ids=["get_locked_kernel", "load_kernel"])
def test_lockfile_none_without_a_lock_in_the_metadata_says_where_it_looked(
        tmp_path: Path, env, monkeypatch, load) -> None:
    from kernelforge.errors import LockError

    package = _installed_package(tmp_path / "site", None, monkeypatch)
    name = package.__name__  # type: ignore[attr-defined]
    with pytest.raises(LockError) as info:
        package.load(load, REPO)  # type: ignore[attr-defined]
    said = str(info.value)
    assert said.startswith(f"{load.__name__}(lockfile=None) reads the lock file from the "
                           "installed metadata of the calling package, but the installed "
                           f"metadata of {name} 1.0 ({tmp_path / 'site' / name}-1.0.dist-info)"
                           f", the distribution that provides the calling module {name!r}, "
                           "holds neither kernelforge.lock nor kernels.lock"), said
    assert "Fix: pass lockfile= the path of the project's kernelforge.lock" in said
    with pytest.raises(LockError, match=f"the calling module {__name__!r} belongs to no "
                                        "installed distribution"):
        load(REPO, lockfile=None)  # this test module is installed nowhere


def _namespace_portion(site: Path, namespace: str, part: str, lock: Path) -> None:
    """One distribution's portion ``namespace.part`` of a namespace package shared with
    others, with its RECORD and ``lock`` in its metadata, as pip installs it."""
    _install(site, f"{namespace}/{part}", f"{namespace}-{part}", namespace, lock, record=True)


def test_lockfile_none_in_a_shared_namespace_reads_the_callers_own_lock(
        tmp_path: Path, env, monkeypatch) -> None:
    """Two distributions that share a namespace package each lock their own kernels: a
    call from one's module reads that distribution's lock (told by its installed files),
    not whichever sorts first; where the files do not tell, the error says so."""
    import importlib
    import uuid

    from kernelforge.errors import LockError

    hub = LocalHub(env["hub"])
    _publish(hub, tmp_path / "b1", 1)
    _publish(hub, tmp_path / "b2", 2)
    locks = {}
    for version in (1, 2):
        root = tmp_path / f"project{version}"
        root.mkdir()
        (root / "pyproject.toml").write_text(
            f'[tool.kernels.dependencies]\n"{REPO}" = {version}\n')
        locks[version] = lock_project(root).hf_path
    site = tmp_path / "site"
    namespace = f"kf_ns_{uuid.uuid4().hex[:8]}"
    _namespace_portion(site, namespace, "a", locks[1])
    _namespace_portion(site, namespace, "b", locks[2])
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    b = importlib.import_module(f"{namespace}.b")
    a = importlib.import_module(f"{namespace}.a")
    assert b.load(loader.get_locked_kernel, REPO).VALUE == 2
    assert a.load(loader.get_locked_kernel, REPO).VALUE == 1
    (site / f"{namespace}_b-1.0.dist-info" / "RECORD").write_text("")
    (site / f"{namespace}_a-1.0.dist-info" / "RECORD").write_text("")
    with pytest.raises(LockError, match="none of them lists its file"):
        b.load(loader.load_kernel, REPO)


def test_lockfile_none_reads_the_installed_distributions_again_only_after_an_install(
        tmp_path: Path, env, monkeypatch) -> None:
    """Finding the calling package's distribution reads every installed distribution's
    metadata (tens of milliseconds): a second load does not read it again, a package
    installed meanwhile (a new folder in site-packages) is seen."""
    import importlib
    import importlib.metadata as metadata

    hub = LocalHub(env["hub"])
    _publish(hub, tmp_path / "b1", 1)
    root = tmp_path / "project"
    root.mkdir()
    (root / "pyproject.toml").write_text(f'[tool.kernels.dependencies]\n"{REPO}" = 1\n')
    lock = lock_project(root).hf_path
    site = tmp_path / "site"
    package = _installed_package(site, lock, monkeypatch)
    reads = []
    real = metadata.packages_distributions

    def counted() -> object:
        reads.append(1)
        return real()

    monkeypatch.setattr(metadata, "packages_distributions", counted)
    assert package.load(loader.get_locked_kernel, REPO).VALUE == 1  # type: ignore[attr-defined]
    first = len(reads)
    assert package.load(loader.get_locked_kernel, REPO).VALUE == 1  # type: ignore[attr-defined]
    assert package.load(loader.load_kernel, REPO).VALUE == 1  # type: ignore[attr-defined]
    assert len(reads) == first <= 1
    # another package installed into the same folder, sys.path unchanged
    name = f"{package.__name__}_later"  # type: ignore[attr-defined]
    _install(site, name, name, name, lock)
    importlib.invalidate_caches()
    later = importlib.import_module(name)
    assert later.load(loader.get_locked_kernel, REPO).VALUE == 1  # type: ignore[attr-defined]
    assert len(reads) == first + 1


def test_lockfile_none_in_a_module_run_with_python_m_reads_its_packages_lock(
        tmp_path: Path, env, monkeypatch) -> None:
    """'python -m pkg.train' runs the module as __main__: its package's installed lock is
    read all the same (its import name, from __spec__), in a namespace package too."""
    import importlib
    import runpy
    import uuid

    hub = LocalHub(env["hub"])
    _publish(hub, tmp_path / "b1", 1)
    _publish(hub, tmp_path / "b2", 2)
    root = _project(tmp_path / "project", 1)
    lock = lock_project(root).path
    site = tmp_path / "site"
    plain = f"kf_main_{uuid.uuid4().hex[:8]}"
    namespace = f"kf_ns_{uuid.uuid4().hex[:8]}"
    _install(site, plain, plain, plain, lock)
    _namespace_portion(site, namespace, "a", lock)
    _namespace_portion(site, namespace, "b", lock_project(_project(tmp_path / "p2", 2)).path)
    body = ("from kernelforge import get_locked_kernel\n"
            f"VALUE = get_locked_kernel({REPO!r}, lockfile=None, backend='cpu').VALUE\n")
    (site / plain / "train.py").write_text(body)
    (site / namespace / "a" / "train.py").write_text(body)
    record = site / f"{namespace}_a-1.0.dist-info" / "RECORD"
    record.write_text(record.read_text() + f"{namespace}/a/train.py,,\n")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    for module in (f"{plain}.train", f"{namespace}.a.train"):
        ran = runpy.run_module(module, run_name="__main__", alter_sys=True)
        assert ran["VALUE"] == 1, module


def test_a_locked_load_chooses_among_the_variants_the_lock_lists(
        tmp_path: Path, env) -> None:
    """The hub's commit holds a variant the lock does not list (a lock that pins a subset):
    a locked load chooses among the lock's variants only, never the hub's other one."""
    import json

    hub = LocalHub(env["hub"])
    ids = {name: uid(name[6:9]) for name in ("torch-cpu", "torch-universal")}
    for value, (name, module_id) in enumerate(ids.items(), start=1):
        make_variant(tmp_path / "b", name, module_id=module_id, value=value)
    hub.publish(REPO, tmp_path / "b", version=1)
    root = _project(tmp_path / "p", 1)
    lock_project(root)
    best = loader.kernel_info(REPO, lockfile=root, hub=hub).variant
    other, = set(ids) - {best}
    doc = json.loads((root / "kernelforge.lock").read_text())
    del doc["kernels"][REPO]["variants"][best]
    (root / "kernelforge.lock").write_text(json.dumps(doc))
    info = loader.kernel_info(REPO, lockfile=root, hub=hub)
    assert info.variant == other
    assert not [line for line in info.trace if best in line]
    assert loader.get_locked_kernel(REPO, lockfile=root, hub=hub).__name__ == ids[other]
