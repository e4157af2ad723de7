"""What runs is what was verified: attacks on the window between the digest check and the
import, on a metadata.json that reads differently twice, on a local-hub commit record
rewritten between the trust decision and the load, and on names with a trailing newline.

Each attack is staged in-process: the hub's files change right after the step the
attacker races (a hostile hub on a file system it controls wins such races every time).
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import py_compile
import shutil
import subprocess
import sys
import sysconfig
import time
import types
from pathlib import Path

import pytest
from kf_sharing import isolate, make_variant, uid
from kf_testutil import write_metadata

from kernelforge import digest, loader, signing, trust
from kernelforge.errors import IntegrityError, TrustError
from kernelforge.hub import LocalHub
from kernelforge.hub.base import (
    VERSION_BRANCH_RE,
    check_ref_name,
    is_commit,
    validate_repo_id,
    version_branches,
)

pytestmark = pytest.mark.usefixtures("cpu_system")

REPO = "victim-org/relu"
EVIL = "PWNED = 1\ndef double(x):\n    return 2 * x\n"


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path: Path) -> dict[str, Path]:
    return isolate(monkeypatch, tmp_path)


def _writable(vdir: Path) -> None:
    for dirpath, _dirs, files in os.walk(vdir):
        os.chmod(dirpath, 0o755)
        for name in files:
            os.chmod(os.path.join(dirpath, name), 0o644)


def _published(env, tmp_path: Path, module_id: str, **kw) -> tuple[LocalHub, str, Path]:
    hub = LocalHub(env["hub"])
    make_variant(tmp_path / "p", module_id=module_id, **kw)
    commit = hub.publish(REPO, tmp_path / "p", version=1).commit
    vdir = hub.variant_path(REPO, commit, "torch-cpu")
    _writable(vdir)
    return hub, commit, vdir


def _after_verification(monkeypatch, change) -> None:
    """Run ``change()`` right after the loader's digest check, before the import."""
    real = digest.verify_variant

    def racing(*args, **kwargs):
        out = real(*args, **kwargs)
        change()
        return out

    monkeypatch.setattr(digest, "verify_variant", racing)


def _refused(call, problem: str, module_id: str, kind: type[Exception] = IntegrityError) -> None:
    with pytest.raises(kind) as info:
        call()
    assert problem in str(info.value), str(info.value)
    assert module_id not in sys.modules
    assert not any(getattr(m, "PWNED", 0) for m in list(sys.modules.values())
                   if getattr(m, "__name__", "").startswith(module_id))


def test_an_extension_planted_after_verification_is_not_imported(env, tmp_path, monkeypatch):
    module_id = uid("plant")
    hub, _commit, vdir = _published(env, tmp_path, module_id)
    planted = vdir / f"helper{sysconfig.get_config_var('EXT_SUFFIX')}"
    _after_verification(monkeypatch, lambda: planted.write_bytes(b"\x7fELF not verified"))
    _refused(lambda: loader.get_kernel(REPO, version=1, hub=hub),
             f"extra: {planted.name} (no digest covers it", module_id)


def _with_extension(env, tmp_path: Path, module_id: str) -> tuple[LocalHub, Path, str]:
    """A kernel whose package imports an extension (a stand-in, no library), published
    to the test's local hub: the hub, the variant directory (its files writable) and the
    extension's file name."""
    ext = f"_ext{sysconfig.get_config_var('EXT_SUFFIX')}"
    vdir = make_variant(tmp_path / "p", module_id=module_id)
    (vdir / "__init__.py").write_text("from . import _ext\nVALUE = 1\n")
    (vdir / ext).write_bytes(b"\x7fELF verified, but not a library")
    (vdir / "metadata.json").unlink()
    write_metadata(vdir, module_id)
    hub = LocalHub(env["hub"])
    commit = hub.publish(REPO, tmp_path / "p", version=1).commit
    vdir = hub.variant_path(REPO, commit, "torch-cpu")
    _writable(vdir)
    return hub, vdir, ext


def _dynamic_loader(monkeypatch) -> list[str]:
    """Stand in for the dynamic loader (the test's extension is no library): the names
    of the extensions it is asked to load, after the loader's own check passed."""
    loaded: list[str] = []

    def create_module(self, spec):
        loaded.append(os.path.basename(self.path))
        return types.ModuleType(spec.name)

    monkeypatch.setattr(importlib.machinery.ExtensionFileLoader, "create_module",
                        create_module)
    monkeypatch.setattr(importlib.machinery.ExtensionFileLoader, "exec_module",
                        lambda self, module: None)
    return loaded


def test_an_extension_changed_after_verification_is_not_loaded(env, tmp_path, monkeypatch):
    """The extension a kernel imports is checked against its digest right before the
    dynamic loader reads it: one rewritten after the digest check is refused, naming it."""
    module_id = uid("ext")
    hub, vdir, ext = _with_extension(env, tmp_path, module_id)
    _after_verification(monkeypatch, lambda: (vdir / ext).write_bytes(b"\x7fELF swapped"))
    _refused(lambda: loader.get_kernel(REPO, version=1, hub=hub),
             f"changed: {ext} (after the kernel was verified", module_id)


def test_an_extension_changed_through_a_writable_mapping_is_not_loaded(env, tmp_path,
                                                                       monkeypatch):
    """A process that mapped the extension writable and wrote to it a while before the
    load can change its bytes through that mapping after the digest check, and no field
    of fstat changes: a page already dirty takes further writes without the fault at
    which the kernel sets the file's times (on ext4 and tmpfs alike). Its size, inode and
    times are no proof of its bytes, so the extension is hashed again right before the
    dynamic loader reads it, however long ago it was written."""
    import mmap

    module_id = uid("mapped")
    hub, vdir, ext = _with_extension(env, tmp_path, module_id)
    with open(vdir / ext, "r+b") as f:
        mapped = mmap.mmap(f.fileno(), 0)
    try:
        mapped[0:1] = mapped[0:1]  # the page is dirty and writable from now on
        time.sleep(3.5)  # the file's times now lie seconds before the load, as for a
        # kernel fetched earlier: no later write could share their clock tick
        before = os.stat(vdir / ext)

        def rewrite() -> None:
            mapped[-7:] = b"yrarbil"

        _after_verification(monkeypatch, rewrite)
        loaded = _dynamic_loader(monkeypatch)
        _refused(lambda: loader.get_kernel(REPO, version=1, hub=hub),
                 f"changed: {ext} (after the kernel was verified", module_id)
        assert loaded == []
        assert (vdir / ext).read_bytes().endswith(b"yrarbil")
        after = os.stat(vdir / ext)
        if os.name == "posix" and sys.platform.startswith("linux"):
            # what makes the attack worth testing: the file looks untouched
            assert (after.st_ino, after.st_size, after.st_mtime_ns, after.st_ctime_ns) \
                == (before.st_ino, before.st_size, before.st_mtime_ns, before.st_ctime_ns)
    finally:
        mapped.close()


def test_an_extension_is_hashed_again_before_every_dynamic_load(env, tmp_path,
                                                                monkeypatch):
    """The extension is read for its digest at the check and again right before the
    dynamic loader reads it."""
    module_id = uid("twice")
    hub, _vdir, ext = _with_extension(env, tmp_path, module_id)
    hashed: list[str] = []
    real = digest.file_digest

    def counting(fh, algorithm="sha256"):
        hashed.append(os.path.basename(fh.name))
        return real(fh, algorithm)

    monkeypatch.setattr(digest, "file_digest", counting)
    loaded = _dynamic_loader(monkeypatch)
    assert loader.get_kernel(REPO, version=1, hub=hub).VALUE == 1
    assert loaded == [ext]
    assert hashed.count(ext) == 2


def test_a_source_changed_after_verification_is_not_run(env, tmp_path, monkeypatch):
    module_id = uid("swap")
    hub, _commit, vdir = _published(env, tmp_path, module_id)
    _after_verification(monkeypatch, lambda: (vdir / "helper.py").write_text(EVIL))
    _refused(lambda: loader.get_kernel(REPO, version=1, hub=hub),
             "changed: helper.py (after the kernel was verified", module_id)


def test_sourceless_bytecode_planted_after_verification_never_runs(env, tmp_path, monkeypatch):
    module_id = uid("pyc")
    hub, _commit, vdir = _published(env, tmp_path, module_id)
    evil = tmp_path / "evil.py"
    evil.write_text(EVIL)

    def plant() -> None:
        py_compile.compile(str(evil), cfile=str(vdir / "helper.pyc"))
        (vdir / "helper.py").unlink()

    _after_verification(monkeypatch, plant)
    _refused(lambda: loader.get_kernel(REPO, version=1, hub=hub),
             "extra: helper.pyc (no digest covers it", module_id)


def test_metadata_that_reads_differently_twice_is_checked_as_parsed(env, tmp_path,
                                                                     monkeypatch):
    """A hostile hub serves evil metadata (listing the digests of evil files) to the
    parser and the signed metadata to the hash: the digests checked must be those of
    the bytes parsed."""
    key = signing.generate_key(tmp_path / "k.pem")
    trust.add_key(key.public.text, name="publisher", repos=("victim-org/*",))
    module_id = uid("twice")
    hub = LocalHub(env["hub"])
    make_variant(tmp_path / "p", module_id=module_id)
    commit = hub.publish(REPO, tmp_path / "p", version=1, signer=key).commit
    (env["config"] / "owner.key").unlink()  # the attacker's hub: not published by us
    vdir = hub.variant_path(REPO, commit, "torch-cpu")
    _writable(vdir)
    signed = (vdir / "metadata.json").read_bytes()
    (vdir / "helper.py").write_text(EVIL)
    meta = json.loads(signed)
    meta["digest"] = digest.digest_block(vdir)
    evil = json.dumps(meta).encode()
    record = hub.commit_path(REPO, commit) / ".commit.json"
    os.chmod(record, 0o644)
    doc = json.loads(record.read_text())
    doc["files"].update({f"build/torch-cpu/{rel}": sha
                         for rel, sha in digest.hash_tree(vdir).items()})
    doc["files"]["build/torch-cpu/metadata.json"] = digest.b64_sha256(signed)
    record.write_text(json.dumps(doc))
    real_fetch = LocalHub.fetch_variant

    def fetch(self, *args, **kwargs):  # the trust policy saw the signed bytes; now evil
        fetched = real_fetch(self, *args, **kwargs)
        (vdir / "metadata.json").write_bytes(evil)
        return fetched

    real = digest.hash_file

    def second_read(path, *args, **kwargs):  # from now on the file reads as signed
        if Path(path) == vdir / "metadata.json":
            (vdir / "metadata.json").write_bytes(signed)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(LocalHub, "fetch_variant", fetch)
    monkeypatch.setattr(digest, "hash_file", second_read)
    _refused(lambda: loader.get_kernel(REPO, version=1, hub=hub), "changed: metadata.json",
             module_id)


def test_a_file_that_reads_differently_twice_is_checked_once_under_sha512(env, tmp_path,
                                                                           monkeypatch):
    """A build whose metadata records sha512 digests: a hostile hub serves an evil file
    to one read and the signed one to the next. The sha512 the metadata checks and the
    sha256 the import checks the bytes against must come from one read of the file, or
    the evil bytes (whose sha256 the hub's unsigned record lists) pass and run."""
    key = signing.generate_key(tmp_path / "k.pem")
    trust.add_key(key.public.text, name="publisher", repos=("victim-org/*",))
    module_id = uid("sha512")
    hub = LocalHub(env["hub"])
    vdir = make_variant(tmp_path / "p", module_id=module_id)
    meta = json.loads((vdir / "metadata.json").read_text())
    meta["digest"] = digest.digest_block(vdir, algorithm="sha512")
    (vdir / "metadata.json").write_text(json.dumps(meta))
    commit = hub.publish(REPO, tmp_path / "p", version=1, signer=key).commit
    (env["config"] / "owner.key").unlink()  # the attacker's hub: not published by us
    vdir = hub.variant_path(REPO, commit, "torch-cpu")
    _writable(vdir)
    helper = vdir / "helper.py"
    signed = helper.read_bytes()
    record = hub.commit_path(REPO, commit) / ".commit.json"
    os.chmod(record, 0o644)
    doc = json.loads(record.read_text())
    doc["files"]["build/torch-cpu/helper.py"] = digest.b64_sha256(EVIL.encode())
    record.write_text(json.dumps(doc))
    reads = []

    def hostile_open(path, *args, **kwargs):  # evil to the first read, signed after
        if Path(path) == helper:
            helper.write_bytes(signed if reads else EVIL.encode())
            reads.append(path)
        return open(path, *args, **kwargs)

    monkeypatch.setattr(digest, "open", hostile_open, raising=False)
    _after_verification(monkeypatch, lambda: helper.write_text(EVIL))
    _refused(lambda: loader.get_kernel(REPO, version=1, hub=hub), "changed: helper.py",
             module_id)


def test_metadata_rewritten_after_the_trust_decision_is_refused(env, tmp_path, monkeypatch):
    """A hostile hub rewrites a signed variant after the trust policy read its
    metadata.json, consistently: evil files, a metadata.json listing their digests and a
    commit record listing them all. Only the sha256 of the metadata the policy saw tells,
    and the load must check it."""
    key = signing.generate_key(tmp_path / "k.pem")
    trust.add_key(key.public.text, name="publisher", repos=("victim-org/*",))
    module_id = uid("resigned")
    hub = LocalHub(env["hub"])
    make_variant(tmp_path / "p", module_id=module_id)
    commit = hub.publish(REPO, tmp_path / "p", version=1, signer=key).commit
    (env["config"] / "owner.key").unlink()  # the attacker's hub: not published by us
    vdir = hub.variant_path(REPO, commit, "torch-cpu")
    record = hub.commit_path(REPO, commit) / ".commit.json"
    real_fetch = LocalHub.fetch_variant

    def rewrite_then_fetch(self, *args, **kwargs):
        _writable(vdir)
        (vdir / "helper.py").write_text(EVIL)
        meta = json.loads((vdir / "metadata.json").read_bytes())
        meta["digest"] = digest.digest_block(vdir)
        (vdir / "metadata.json").write_text(json.dumps(meta))
        os.chmod(record, 0o644)
        doc = json.loads(record.read_text())
        doc["files"].update({f"build/torch-cpu/{rel}": sha for rel, sha in
                             digest.hash_tree(vdir).items()})
        doc["files"]["build/torch-cpu/metadata.json"] = digest.hash_file(vdir / "metadata.json")
        record.write_text(json.dumps(doc))
        return real_fetch(self, *args, **kwargs)

    monkeypatch.setattr(LocalHub, "fetch_variant", rewrite_then_fetch)
    _refused(lambda: loader.get_kernel(REPO, version=1, hub=hub), "changed: metadata.json",
             module_id)


def test_a_commit_record_rewritten_after_the_trust_decision_is_refused(env, tmp_path,
                                                                        monkeypatch):
    """The owner mark is checked on the record whose digests the load then checks."""
    module_id = uid("record")
    hub, commit, vdir = _published(env, tmp_path, module_id, with_digest=False)
    record = hub.commit_path(REPO, commit) / ".commit.json"
    real = LocalHub.owned

    def owned_then_rewritten(self, repo_id, c):
        ok = real(self, repo_id, c)
        (vdir / "helper.py").write_text(EVIL)
        doc = json.loads(record.read_text())
        doc["files"]["build/torch-cpu/helper.py"] = digest.hash_file(vdir / "helper.py")
        os.chmod(record, 0o644)
        record.write_text(json.dumps(doc))
        return ok

    monkeypatch.setattr(LocalHub, "owned", owned_then_rewritten)
    _refused(lambda: loader.get_kernel(REPO, version=1, hub=hub),
             "its commit record changed before the load", module_id, TrustError)


def test_a_module_planted_beside_a_namespace_folder_never_runs(tmp_path, monkeypatch):
    """A folder without ``__init__.py`` inside a variant is a namespace package. Python's
    own finders must not be asked for it: a module file planted in the instant after the
    kernel's finder looked would run unverified."""
    import importlib

    module_id = uid("ns")
    vdir = make_variant(tmp_path / "p", module_id=module_id)
    (vdir / "sub").mkdir()
    (vdir / "sub" / "leaf.py").write_text("WHERE = 'variant'\n")
    from kf_testutil import write_metadata

    write_metadata(vdir, module_id)
    loader.get_local_kernel(vdir)
    real = loader._KernelFinder.find_spec

    def racing(self, fullname, path, target=None):
        spec = real(self, fullname, path, target)
        if fullname == f"{module_id}.sub":
            (vdir / "sub.py").write_text(EVIL)
        return spec

    monkeypatch.setattr(loader._KernelFinder, "find_spec", racing)
    sub = importlib.import_module(f"{module_id}.sub")
    assert not hasattr(sub, "PWNED")
    assert list(sub.__path__) == [str(vdir.resolve() / "sub")]
    assert importlib.import_module(f"{module_id}.sub.leaf").WHERE == "variant"


@pytest.mark.parametrize("planted", ["optional.py", "optional.pyc"])
def test_a_module_planted_after_the_finder_missed_it_never_runs(tmp_path, monkeypatch,
                                                                 planted):
    """A module the kernel's finder does not find (``try: from . import optional``) goes
    on to Python's path finder, which looks in the variant again: through the kernel's
    own checks, so a file planted in that instant is refused, never run."""
    import importlib

    module_id = uid("miss")
    vdir = make_variant(tmp_path / "p", module_id=module_id)
    loader.get_local_kernel(vdir)
    evil = tmp_path / "evil.py"
    evil.write_text(EVIL)
    real = loader._KernelFinder.find_spec

    def racing(self, fullname, path, target=None):
        spec = real(self, fullname, path, target)
        if fullname == f"{module_id}.optional" and spec is None:
            if planted.endswith(".pyc"):
                py_compile.compile(str(evil), cfile=str(vdir / planted))
            else:
                (vdir / planted).write_text(EVIL)
        return spec

    monkeypatch.setattr(loader._KernelFinder, "find_spec", racing)
    with pytest.raises(IntegrityError, match=f"extra: {planted} \\(no digest covers it"):
        importlib.import_module(f"{module_id}.optional")
    assert not any(getattr(m, "PWNED", 0) for m in list(sys.modules.values())
                   if getattr(m, "__name__", "").startswith(module_id))


def test_a_missing_submodule_is_still_a_plain_import_error(tmp_path) -> None:
    import importlib

    module_id = uid("opt")
    loader.get_local_kernel(make_variant(tmp_path / "p", module_id=module_id))
    assert importlib.util.find_spec(f"{module_id}.optional") is None
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"{module_id}.optional")


def test_the_check_survives_a_cleared_path_importer_cache(tmp_path, monkeypatch) -> None:
    """``sys.path_importer_cache.clear()`` (what code does after changing
    ``sys.path_hooks``) must not hand the variant's directories back to plain finders."""
    import importlib

    module_id = uid("clr")
    vdir = make_variant(tmp_path / "p", module_id=module_id)
    loader.get_local_kernel(vdir)
    sys.path_importer_cache.clear()
    real = loader._KernelFinder.find_spec

    def racing(self, fullname, path, target=None):
        spec = real(self, fullname, path, target)
        if fullname == f"{module_id}.optional" and spec is None:
            (vdir / "optional.py").write_text(EVIL)
        return spec

    monkeypatch.setattr(loader._KernelFinder, "find_spec", racing)
    with pytest.raises(IntegrityError, match="extra: optional.py"):
        importlib.import_module(f"{module_id}.optional")


def test_resources_and_module_listing_work_in_a_kernel(tmp_path) -> None:
    import importlib
    import importlib.resources
    import pkgutil

    module_id = uid("res")
    vdir = make_variant(tmp_path / "p", module_id=module_id)
    (vdir / "data").mkdir()
    (vdir / "data" / "table.txt").write_text("1 2 3\n")
    from kf_testutil import write_metadata

    write_metadata(vdir, module_id)
    package = loader.get_local_kernel(vdir)
    assert (importlib.resources.files(package) / "data" / "table.txt").read_text() == "1 2 3\n"
    data = importlib.import_module(f"{module_id}.data")  # a namespace package
    assert list(data.__path__) == [str(vdir.resolve() / "data")]
    assert (importlib.resources.files(data) / "table.txt").read_text() == "1 2 3\n"
    assert "helper" in {m.name for m in pkgutil.iter_modules(package.__path__)}


def test_a_users_module_beside_a_kernel_on_sys_path_imports_as_usual(tmp_path,
                                                                    monkeypatch) -> None:
    """A variant directory that is also on ``sys.path`` (a script run from it) still
    imports the user's own modules there with Python's loaders; only the kernel's
    modules are checked."""
    import importlib

    module_id = uid("cwd")
    vdir = make_variant(tmp_path / "p", module_id=module_id)
    monkeypatch.syspath_prepend(str(vdir))
    loader.get_local_kernel(vdir)
    importlib.import_module(f"{module_id}.helper")
    name = f"bench_utils_{module_id}"
    (vdir / f"{name}.py").write_text("X = 1\n")
    importlib.invalidate_caches()
    try:
        assert importlib.import_module(name).X == 1
    finally:
        sys.modules.pop(name, None)


def _top_level_kernel(tmp_path: Path, sub: str | None, relative_first: bool):
    """A kernel whose ``__init__`` puts its directory (or a vendored folder of it) on
    ``sys.path`` and imports one of its files by a top-level name, with or without a
    relative import first."""
    module_id = uid("tl")
    vdir = make_variant(tmp_path / "p", module_id=module_id)
    folder = vdir / sub if sub else vdir
    folder.mkdir(exist_ok=True)
    name = f"impl_{module_id}"
    (folder / f"{name}.py").write_text("OK = 1\n")
    where = (f"os.path.join(os.path.dirname(__file__), {sub!r})" if sub
             else "os.path.dirname(__file__)")
    (vdir / "__init__.py").write_text(
        ("from . import helper\n" if relative_first else "")
        + f"import os, sys\nsys.path.insert(0, {where})\nimport {name} as impl\nVALUE = 1\n")
    from kf_testutil import write_metadata

    write_metadata(vdir, module_id)
    return vdir, folder, name


@pytest.mark.parametrize(("sub", "relative_first"), [(None, False), ("vendor", True),
                                                     ("vendor", False)])
def test_a_top_level_import_of_a_kernels_file_never_runs_cached_bytecode(
        tmp_path, monkeypatch, sub, relative_first) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    vdir, folder, name = _top_level_kernel(tmp_path, sub, relative_first)
    evil = tmp_path / f"{name}.py"
    evil.write_text(EVIL)
    (folder / "__pycache__").mkdir(exist_ok=True)
    py_compile.compile(str(evil), cfile=str(
        folder / "__pycache__" / f"{name}.{sys.implementation.cache_tag}.pyc"),
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    try:
        assert loader.get_local_kernel(vdir).impl.OK == 1
        assert not hasattr(sys.modules[name], "PWNED")
    finally:
        sys.modules.pop(name, None)


@pytest.mark.parametrize(("sub", "relative_first"), [(None, False), (None, True),
                                                     ("vendor", True)])
def test_a_top_level_import_of_a_changed_kernel_file_is_refused(
        tmp_path, monkeypatch, sub, relative_first) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    vdir, folder, name = _top_level_kernel(tmp_path, sub, relative_first)
    _after_verification(monkeypatch, lambda: (folder / f"{name}.py").write_text(EVIL))
    try:
        with pytest.raises(IntegrityError, match=f"changed: {name}.py"):
            loader.get_local_kernel(vdir)
    finally:
        ran = sys.modules.pop(name, None)
    assert not getattr(ran, "PWNED", 0)


def test_verified_kernels_still_load_and_reload(env, tmp_path) -> None:
    import importlib

    hub, _commit, _vdir = _published(env, tmp_path, uid("ok"))
    module = loader.get_kernel(REPO, version=1, hub=hub)
    assert module.VALUE == 1 and module.helper.double(2) == 4
    assert importlib.reload(module.helper).double(3) == 6


def test_a_source_changed_after_the_import_is_not_what_a_jit_compiles(env, tmp_path) -> None:
    """Compilers that read a function's source back (TorchScript, Triton's @jit, through
    inspect.getsource) get the verified text of a kernel module, not the file as it is
    when they run: a helper.py rewritten after the load (by whoever can write the hub)
    is not what a kernel scripting its helper at its first call compiles."""
    import inspect

    torch = pytest.importorskip("torch")
    module_id = uid("jit")
    hub = LocalHub(env["hub"])
    vdir = make_variant(tmp_path / "p", module_id=module_id)
    (vdir / "helper.py").write_text(
        "def double(x: int) -> int:\n    return 2 * x\n")
    (vdir / "__init__.py").write_text(
        "from . import helper\nVALUE = 1\n\n\ndef compiled():\n"
        "    import torch\n    return torch.jit.script(helper.double)\n")
    from kf_testutil import write_metadata

    write_metadata(vdir, module_id)
    commit = hub.publish(REPO, tmp_path / "p", version=1).commit
    published = hub.variant_path(REPO, commit, "torch-cpu")
    _writable(published)
    kernel = loader.get_kernel(REPO, version=1, hub=hub)
    (published / "helper.py").write_text(
        "def double(x: int) -> int:\n    return 666 + 0 * x\n")
    assert kernel.compiled()(torch.tensor(3)) == 6
    assert "return 2 * x" in inspect.getsource(kernel.helper.double)


def _native_helper(tmp_path: Path, module_id: str, padding: int = 0) -> tuple[Path, Path]:
    """A variant whose ``helper`` is a real extension module (``padding`` zero bytes
    appended to it, which the dynamic loader ignores), and that extension's path."""
    vdir = make_variant(tmp_path / "p", module_id=module_id)
    source = tmp_path / "ext.c"
    source.write_text(
        "#include <Python.h>\n"
        "static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, \"helper\", NULL, -1, NULL};\n"
        "PyMODINIT_FUNC PyInit_helper(void) {\n"
        "  PyObject *mod = PyModule_Create(&m);\n"
        "  PyModule_AddIntConstant(mod, \"NATIVE\", 7);\n"
        "  return mod;\n}\n")
    target = vdir / f"helper{sysconfig.get_config_var('EXT_SUFFIX')}"
    subprocess.run(["cc", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}",
                    str(source), "-o", str(target)], check=True)
    with open(target, "ab") as f:
        f.truncate(target.stat().st_size + padding)
    (vdir / "helper.py").unlink()
    from kf_testutil import write_metadata

    write_metadata(vdir, module_id)
    return vdir, target


needs_cc = pytest.mark.skipif(sys.platform != "linux" or shutil.which("cc") is None,
                              reason="needs Linux and a C compiler")


@needs_cc
def test_an_extension_loads_from_the_verified_bytes(tmp_path) -> None:
    """A real extension module is checked against its digest and loaded from its path."""
    vdir, target = _native_helper(tmp_path, uid("ext"))
    module = loader.get_local_kernel(vdir)
    assert module.helper.NATIVE == 7
    assert module.helper.__file__ == str(target)


@needs_cc
def test_an_extension_is_checked_again_without_reading_it_into_memory(tmp_path) -> None:
    """GPU extensions built for many architectures reach hundreds of MB: the check just
    before the load streams the file, as the verification does."""
    import tracemalloc

    vdir, _target = _native_helper(tmp_path, uid("big"), padding=64 << 20)
    tracemalloc.start()
    try:
        module = loader.get_local_kernel(vdir)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert module.helper.NATIVE == 7
    assert peak < 16 << 20, f"loading held {peak >> 20} MiB"


def test_a_kernel_loaded_by_a_relative_path_keeps_importing_its_own_files(
        tmp_path, monkeypatch) -> None:
    """A submodule imported after the working directory changed comes from the variant,
    verified, not from whatever the relative path names now."""
    import importlib

    module_id = uid("rel")
    vdir = make_variant(tmp_path / "p", module_id=module_id)
    (vdir / "lazy.py").write_text("WHERE = 'variant'\n")
    from kf_testutil import write_metadata

    write_metadata(vdir, module_id)
    monkeypatch.chdir(vdir.parent)
    module = loader.get_local_kernel(vdir.name)
    elsewhere = tmp_path / "elsewhere" / vdir.name
    elsewhere.mkdir(parents=True)
    (elsewhere / "lazy.py").write_text(EVIL + "WHERE = 'elsewhere'\n")
    monkeypatch.chdir(elsewhere.parent)
    assert importlib.import_module(f"{module_id}.lazy").WHERE == "variant"
    assert all(os.path.isabs(entry) for entry in module.__path__)


@pytest.mark.parametrize("call", [
    lambda: validate_repo_id("victim-org/relu\n"),
    lambda: check_ref_name("tag", "v1\n"),
])
def test_names_with_a_trailing_newline_are_refused(call) -> None:
    with pytest.raises(ValueError, match="not a valid"):
        call()


def test_ids_and_branches_with_a_trailing_newline_are_not_commits_or_versions() -> None:
    assert not is_commit("a" * 40 + "\n")
    assert VERSION_BRANCH_RE.match("v1\n") is None
    assert version_branches({"v1": "a" * 40, "v1\n": "b" * 40}) == {1: "a" * 40}
