"""Loading kernels (kernelforge.loader): selection, verification, caching, overrides."""

from __future__ import annotations

import builtins
import dataclasses
import io
import logging
import os
import re
import subprocess
import sys
import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest
from kf_testutil import write_metadata, write_noarch_project

from kernelforge import loader
from kernelforge.errors import HubError, IntegrityError, VariantError, VariantNotFoundError
from kernelforge.hub import LocalHub

pytestmark = pytest.mark.usefixtures("cpu_system")

variants = pytest.importorskip("kernelforge.variants")

REPO = "kernels-test/relu"


def make_variant(
    project: Path,
    variant: str,
    *,
    module_id: str,
    value: int = 1,
    version: int | None = 1,
    backend: str | None = None,
    archs: list[str] | None = None,
    with_digest: bool = True,
    init: str | None = None,
) -> Path:
    """Fabricate ``project/build/<variant>/``: a tiny pure-Python kernel package."""
    vdir = project / "build" / variant
    vdir.mkdir(parents=True)
    (vdir / "__init__.py").write_text(
        init if init is not None else f"from . import helper\nVALUE = {value}\n"
    )
    (vdir / "helper.py").write_text("def double(x):\n    return 2 * x\n")
    write_metadata(vdir, module_id, version=version, backend=backend, archs=archs,
                   with_digest=with_digest)
    return vdir


def uid(tag: str) -> str:
    """A module id no other test uses (ids live in sys.modules for the whole run)."""
    return f"_relu_{tag}_{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def arch_variant() -> str:
    return str(variants.build_variant(variants.detect_system(), backend="cpu"))


@pytest.fixture
def hub(tmp_path: Path) -> LocalHub:
    return LocalHub(tmp_path / "hub")


@pytest.fixture(autouse=True)
def _no_overrides(monkeypatch) -> None:
    monkeypatch.delenv("LOCAL_KERNELS", raising=False)


def publish(hub: LocalHub, root: Path, version: int = 1, **variants_: dict) -> str:
    for name, kw in variants_.items():
        make_variant(root, name.replace("_", "-"), version=version, **kw)
    return hub.publish(REPO, root, version=version).commit


# --- selection ---------------------------------------------------------------------------


def test_local_kernels_names_a_repository_in_any_case(monkeypatch, tmp_path: Path) -> None:
    make_variant(tmp_path / "p", "torch-universal", module_id=uid("lk"), value=5)
    monkeypatch.setenv("LOCAL_KERNELS", f"Org/Relu={tmp_path / 'p'}")
    assert loader.get_kernel("org/relu").VALUE == 5
    make_variant(tmp_path / "q", "torch-universal", module_id=uid("lk"), value=6)
    monkeypatch.setenv("LOCAL_KERNELS", f"Org/Relu={tmp_path / 'p'}:org/relu={tmp_path / 'q'}")
    assert loader.get_kernel("org/relu").VALUE == 6  # the entry as written wins
    with pytest.raises(ValueError, match="several entries that differ only in case"):
        loader.get_kernel("ORG/RELU")


def test_a_repository_id_in_other_case_loads_the_same_kernel(hub: LocalHub,
                                                              tmp_path: Path) -> None:
    """Repository ids ignore case, as on the Hugging Face Hub: your own kernel loads
    under any spelling of its id (the owner mark is checked against the stored one)."""
    publish(hub, tmp_path / "p", torch_universal={"module_id": uid("case"), "value": 7})
    module = loader.get_kernel(REPO.upper(), version=1, hub=hub)
    assert module.VALUE == 7
    assert loader.get_kernel(REPO, version=1, hub=hub) is module


def test_two_builds_side_by_side(hub: LocalHub, tmp_path: Path, arch_variant: str) -> None:
    id1, id2 = uid("a"), uid("b")
    make_variant(tmp_path / "p1", arch_variant, module_id=id1, value=1)
    make_variant(tmp_path / "p1", "torch-cpu", module_id=id1 + "_noarch", value=10)
    c1 = hub.publish(REPO, tmp_path / "p1", version=1).commit
    make_variant(tmp_path / "p2", "torch-universal", module_id=id2, value=2)
    c2 = hub.publish(REPO, tmp_path / "p2", version=1).commit

    new = loader.get_kernel(REPO, version=1, hub=hub)
    old = loader.get_kernel(REPO, revision=c1, hub=hub)
    assert (new.__name__, new.VALUE) == (id2, 2)
    assert (old.__name__, old.VALUE) == (id1, 1)  # the compiled-arch name beats noarch
    assert sys.modules[id1] is old and sys.modules[id2] is new
    assert old.helper.double(3) == 6 and sys.modules[f"{id1}.helper"] is old.helper
    assert Path(old.__file__).parent == hub.variant_path(REPO, c1, arch_variant)
    assert loader.get_kernel(REPO, revision=c2[:8], hub=hub) is new


def test_newest_version_is_announced_in_the_log(
    hub: LocalHub, tmp_path: Path, caplog, capsys
) -> None:
    publish(hub, tmp_path / "v1", 1, torch_cpu={"module_id": uid("v1")})
    c2 = publish(hub, tmp_path / "v2", 2, torch_cpu={"module_id": uid("v2"), "value": 2})
    caplog.set_level(logging.INFO, logger="kernelforge")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module = loader.get_kernel(REPO, hub=hub)
    assert module.VALUE == 2
    message = (
        f"kernelforge: loading {REPO} version 2 (branch v2, revision {c2[:7]}) "
        "\u2014 pass version=2 to pin it"
    )  # no command of the command line loads a kernel: no remark about --version
    # logged at WARNING, which Python shows even when the application set up no logging
    assert [r.levelno for r in caplog.records if r.getMessage() == message] == [logging.WARNING]
    assert capsys.readouterr() == ("", "")


def test_kernel_info_and_has_kernel_do_not_say_they_load(hub: LocalHub, tmp_path: Path,
                                                          caplog) -> None:
    """They load nothing, so they log no "loading ..." line: the notes of kernel_info say
    which version a load would take (get_kernel still says it, see above)."""
    publish(hub, tmp_path / "v1", 1, torch_cpu={"module_id": uid("i1")})
    c2 = publish(hub, tmp_path / "v2", 2, torch_cpu={"module_id": uid("i2"), "value": 2})
    caplog.set_level(logging.INFO, logger="kernelforge")
    info = loader.kernel_info(REPO, hub=hub)
    assert (info.branch, info.commit) == ("v2", c2)
    assert f"no version requested: newest version 2 (branch v2) -> commit {c2[:12]}" in info.notes
    assert "a newer version exists: 2" in loader.kernel_info(REPO, version=1, hub=hub).notes
    assert loader.has_kernel(REPO, hub=hub) and loader.has_kernel(REPO, version=1, hub=hub)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_version_and_revision_selection(hub: LocalHub, tmp_path: Path) -> None:
    c1 = publish(hub, tmp_path / "v1", 1, torch_cpu={"module_id": uid("v1"), "value": 1})
    publish(hub, tmp_path / "v2", 2, torch_cpu={"module_id": uid("v2"), "value": 2})
    hub.tag(REPO, "first", c1)
    assert loader.get_kernel(REPO, version=1, hub=hub).VALUE == 1
    assert loader.get_kernel(REPO, version=2, hub=hub.root).VALUE == 2
    assert loader.get_kernel(REPO, revision="v1", hub=str(hub.root)).VALUE == 1
    assert loader.get_kernel(REPO, revision="first", hub=hub).VALUE == 1
    assert loader.get_kernel(REPO, revision=c1[:7], hub=hub).VALUE == 1
    info = loader.kernel_info(REPO, revision="first", hub=hub)
    assert (info.branch, info.commit, info.variant) == (None, c1, "torch-cpu")
    info = loader.kernel_info(REPO, version=2, hub=hub)
    assert (info.repo, info.branch, info.version, info.source) == (REPO, "v2", 2, "hub")
    assert info.trace == ("torch-cpu: accepted, pure-Python build for cpu",)
    assert f"{REPO} (branch v2" in info.describe()

    with pytest.raises(ValueError, match="revision and version"):
        loader.get_kernel(REPO, revision="v1", version=1, hub=hub)
    with pytest.raises(ValueError, match="version"):
        loader.get_kernel(REPO, version="1", hub=hub)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="repo_id"):
        loader.get_kernel("not a repo", hub=hub)
    with pytest.raises(HubError, match="version 7 of kernels-test/relu not found.*1, 2"):
        loader.get_kernel(REPO, version=7, hub=hub)
    with pytest.raises(HubError, match="revision 'nope' not found"):
        loader.get_kernel(REPO, revision="nope", hub=hub)


def test_no_fitting_variant_shows_the_trace(hub: LocalHub, tmp_path: Path) -> None:
    foreign = "torch29-cxx11-cu126-aarch64-linux"
    if str(variants.detect_system().cpu) == "aarch64":
        foreign = "torch29-cxx11-cu126-x86_64-linux"
    publish(hub, tmp_path / "p", 1, **{foreign: {"module_id": uid("x"), "backend": "cuda"}},
            torch_cuda={"module_id": uid("y"), "backend": "cuda"})
    with pytest.raises(VariantNotFoundError) as info:
        loader.get_kernel(REPO, version=1, hub=hub)
    text = str(info.value)
    assert f"{foreign}: rejected" in text and "torch-cuda: rejected" in text
    assert "this system:" in text
    assert not loader.has_kernel(REPO, version=1, hub=hub)


def test_a_revision_without_builds_names_the_version_branches(hub: LocalHub,
                                                              tmp_path: Path) -> None:
    # main holds the card only; the builds are on v1 and v2
    publish(hub, tmp_path / "p1", 1, torch_cpu={"module_id": uid("m1")})
    make_variant(tmp_path / "p2", "torch-cpu", module_id=uid("m2"), version=2)
    hub.publish(REPO, tmp_path / "p2", version=2, card="# relu\n")
    with pytest.raises(VariantNotFoundError) as info:
        loader.get_kernel(REPO, revision="main", hub=hub)
    text = str(info.value)
    assert "holds no build variants at all" not in text  # v1 and v2 hold builds
    assert "holds no build variants (no build/<variant>/ folder)" in text
    assert "version branches (v1, v2)" in text and "version=2" in text
    with pytest.raises(VariantNotFoundError, match="version branches"):
        loader.kernel_info(REPO, revision="main", hub=hub)


def test_arch_check_falls_back_to_a_covering_build(
    hub: LocalHub, tmp_path: Path, monkeypatch
) -> None:
    facts = dataclasses.replace(
        variants.detect_system(), backend="cuda", backend_version=(12, 8), gpu_archs=("8.0",)
    )
    monkeypatch.setattr(variants, "detect_system", lambda: facts)
    uni = uid("uni")
    publish(hub, tmp_path / "p", 1,
            torch_cuda={"module_id": uid("cuda"), "backend": "cuda", "archs": ["9.0"]},
            torch_universal={"module_id": uni})
    info = loader.kernel_info(REPO, version=1, hub=hub)
    assert info.variant == "torch-universal"
    assert any(re.match(r"torch-cuda: rejected after all, .*8\.0.* not covered", line)
               for line in info.trace)
    assert loader.get_kernel(REPO, version=1, hub=hub).__name__ == uni
    assert loader.kernel_info(REPO, version=1, hub=hub, check_arch=False).variant == "torch-cuda"

    publish(hub, tmp_path / "p2", 2,
            torch_cuda={"module_id": uid("cuda"), "backend": "cuda", "archs": ["9.0"]})
    with pytest.raises(VariantNotFoundError, match=r"8\.0.* not covered"):
        loader.get_kernel(REPO, version=2, hub=hub)
    assert not loader.has_kernel(REPO, version=2, hub=hub)


def test_a_refusal_by_the_gpu_check_alone_says_how_to_load_anyway(
    tmp_path: Path, monkeypatch
) -> None:
    facts = dataclasses.replace(
        variants.detect_system(), backend="cuda", backend_version=(12, 8), gpu_archs=("8.0",)
    )
    monkeypatch.setattr(variants, "detect_system", lambda: facts)
    module_id = uid("arch")
    vdir = make_variant(tmp_path, "torch-cuda", module_id=module_id, archs=["9.0a"])
    for path in (tmp_path, vdir):  # chosen among variants, or given directly
        with pytest.raises(VariantNotFoundError) as info:
            loader.get_local_kernel(path)
        last = str(info.value).splitlines()[-1]
        assert last.startswith("fix: ") and "check_arch=False" in last, str(info.value)
    assert loader.get_local_kernel(tmp_path, check_arch=False).__name__ == module_id

    make_variant(tmp_path / "other", "torch-rocm", module_id=uid("rocm"))
    with pytest.raises(VariantNotFoundError) as info:  # the GPU check did not refuse it
        loader.get_local_kernel(tmp_path / "other")
    assert "check_arch" not in str(info.value)


# --- caching -----------------------------------------------------------------------------


def test_repeated_call_does_not_touch_the_disk(hub: LocalHub, tmp_path: Path, monkeypatch) -> None:
    publish(hub, tmp_path / "p", 1, torch_cpu={"module_id": uid("c")})
    monkeypatch.setenv("KERNELFORGE_HUB", str(hub.root))
    first = loader.get_kernel(REPO)
    pinned = loader.get_kernel(REPO, version=1, hub=hub)
    assert pinned is first  # one variant directory, one module

    def no_disk(*args, **kwargs):
        raise AssertionError("touched the disk")

    with monkeypatch.context() as m:  # undone before pytest reports, even on failure
        for mod, name in [(os, "stat"), (os, "lstat"), (os, "listdir"), (os, "scandir"),
                          (os, "open"), (builtins, "open"), (io, "open")]:
            m.setattr(mod, name, no_disk)
        for name in ["exists", "is_dir", "is_file", "iterdir", "read_text", "read_bytes", "stat"]:
            m.setattr(Path, name, no_disk)
        again = loader.get_kernel(REPO)
        pinned_again = loader.get_kernel(REPO, version=1, hub=hub)
    assert again is first and pinned_again is first


def test_a_publish_while_loaded_leaves_the_module_and_loads_beside_it(
        hub: LocalHub, tmp_path: Path) -> None:
    # A long-running process: the branch it loaded from moves. The same call keeps its
    # module; the new revision, asked for by commit, loads beside it; a build with the
    # loaded one's module id but other files is refused rather than swapped in.
    first_id = uid("live")
    publish(hub, tmp_path / "a", 1, torch_cpu={"module_id": first_id, "value": 1})
    first = loader.get_kernel(REPO, version=1, hub=hub)
    newer = publish(hub, tmp_path / "b", 1, torch_cpu={"module_id": uid("live"), "value": 2})

    assert loader.get_kernel(REPO, version=1, hub=hub) is first
    assert loader.kernel_info(REPO, version=1, hub=hub).commit == newer
    second = loader.get_kernel(REPO, revision=newer, hub=hub)
    assert (first.VALUE, second.VALUE) == (1, 2)
    assert sys.modules[first.__name__] is first and sys.modules[second.__name__] is second

    clash = publish(hub, tmp_path / "c", 1, torch_cpu={"module_id": first_id, "value": 3})
    with pytest.raises(ImportError, match="a different build with the same id is already "
                                          "loaded"):
        loader.get_kernel(REPO, revision=clash, hub=hub)
    assert first.VALUE == 1


@pytest.mark.parametrize("given", ["path", "LocalHub", "KERNELFORGE_HUB"])
def test_a_relative_hub_in_another_directory_loads_that_hubs_kernel(
        tmp_path: Path, monkeypatch, given: str) -> None:
    """The module a repeated call returns is the one of the hub the call names now: a
    relative hub path names another hub after a change of directory."""
    for where, value in (("a", 1), ("b", 2)):
        publish(LocalHub(tmp_path / where / "hub"), tmp_path / f"p{where}",
                torch_cpu={"module_id": uid(f"rel{where}"), "value": value})

    def load() -> object:
        if given == "KERNELFORGE_HUB":
            monkeypatch.setenv("KERNELFORGE_HUB", "hub")
            return loader.get_kernel(REPO, version=1)
        return loader.get_kernel(REPO, version=1,
                                 hub="hub" if given == "path" else LocalHub("hub"))

    monkeypatch.chdir(tmp_path / "a")
    first = load()
    monkeypatch.chdir(tmp_path / "b")
    second = load()
    assert (first.VALUE, second.VALUE) == (1, 2)
    assert Path(second.__file__).is_relative_to(tmp_path / "b" / "hub")
    monkeypatch.chdir(tmp_path / "a")  # and back: the first module again
    assert load() is first


def test_a_relative_download_cache_names_another_hub_after_a_change_of_directory(
        tmp_path: Path, monkeypatch) -> None:
    from kernelforge.hub.hf import HfHub

    for where in ("a", "b"):
        (tmp_path / where).mkdir()
    monkeypatch.chdir(tmp_path / "a")
    in_a = HfHub(cache="downloads").cache_key()
    monkeypatch.chdir(tmp_path / "b")
    assert HfHub(cache="downloads").cache_key() != in_a
    assert HfHub(cache=tmp_path / "b" / "downloads").cache_key() == HfHub(
        cache="downloads").cache_key()


def test_load_variant_caches_by_directory(tmp_path: Path) -> None:
    vdir = make_variant(tmp_path / "p", "torch-cpu", module_id=uid("lv"))
    module = loader.load_variant(vdir)
    assert loader.load_variant(vdir) is module
    assert loader.get_local_kernel(vdir) is module


def test_load_variant_of_a_project_or_a_missing_path_says_what_it_was_given(
        tmp_path: Path) -> None:
    project = tmp_path / "p"
    make_variant(project, "torch-cpu", module_id=uid("lvp"))
    for given in (project, project / "build"):
        with pytest.raises(HubError, match=r"is not a build variant directory but holds "
                           r"build variants.*get_local_kernel\("):
            loader.load_variant(given)
    with pytest.raises(HubError, match=r"variant_dir: .*nope does not exist"):
        loader.load_variant(tmp_path / "nope")
    with pytest.raises(HubError, match=r"metadata\.json: missing"):  # an empty folder
        loader.load_variant(tmp_path)


def test_a_build_whose_id_lacks_the_leading_underscore_is_the_same_extension(
        tmp_path: Path) -> None:
    """Builds made before ids kept the op namespace's leading '_' (relu_cpu_<uid>) and
    after (_relu_cpu_<uid>) of the same sources register the same op namespace: loading
    both in one process gives the first module again (torch would abort the process on
    a second registration), and a different build under either spelling is refused."""
    new_id = uid("under")
    new = make_variant(tmp_path / "new", "torch-cpu", module_id=new_id)
    old = make_variant(tmp_path / "old", "torch-cpu", module_id=new_id.lstrip("_"))
    first = loader.load_variant(old)
    assert loader.load_variant(new) is first
    other = make_variant(tmp_path / "other", "torch-cpu", module_id=new_id, value=2)
    with pytest.raises(ImportError, match="a different build with the same id"):
        loader.load_variant(other)
    # only one '_' is the namespace's: two are another id, another kernel
    double = make_variant(tmp_path / "double", "torch-cpu", module_id="_" + new_id, value=3)
    assert loader.load_variant(double).VALUE == 3


# --- integrity ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tamper", "problem"),
    [
        (lambda v: (v / "helper.py").write_text("evil = 1\n"), "changed: helper.py"),
        (lambda v: (v / "helper.py").unlink(), "missing: helper.py"),
        (lambda v: (v / "extra.py").write_text("x = 1\n"), "extra: extra.py"),
        (lambda v: (v / "metadata.json").write_text(
            (v / "metadata.json").read_text().replace('"relu"', '"relu2"', 1)),
         "changed: metadata.json"),
    ],
)
def test_tampered_hub_files_are_refused(hub: LocalHub, tmp_path: Path, tamper, problem) -> None:
    module_id = uid("t")
    c = publish(hub, tmp_path / "p", 1, torch_cpu={"module_id": module_id})
    vdir = hub.variant_path(REPO, c, "torch-cpu")
    for f in vdir.iterdir():
        f.chmod(0o644)
    tamper(vdir)
    # kernel_info says what the load will do: the files are on disk, so it checks them
    said = loader.kernel_info(REPO, version=1, hub=hub).trust
    assert said.startswith("trust: refused") and problem in said, said
    assert "the hub's copy of this revision is damaged: publish the build again" in said
    with pytest.raises(IntegrityError, match=problem) as info:
        loader.get_kernel(REPO, version=1, hub=hub)
    assert info.value.where == vdir
    assert module_id not in sys.modules


def test_info_shows_a_damaged_local_hub_copy_on_one_readable_line(
        hub: LocalHub, tmp_path: Path, capsys) -> None:
    """The trust decision is one line of 'kernelforge info': a refusal listing several
    files keeps them on it, separated, rather than as escaped line breaks."""
    from kernelforge.cli import main

    c = publish(hub, tmp_path / "p", 1, torch_cpu={"module_id": uid("t")})
    vdir = hub.variant_path(REPO, c, "torch-cpu")
    for f in vdir.iterdir():
        f.chmod(0o644)
    (vdir / "helper.py").write_text("evil = 1\n")
    (vdir / "extra.py").write_text("x = 1\n")
    said = loader.kernel_info(REPO, version=1, hub=hub).trust
    assert said == (
        f"trust: refused, refusing to load {vdir}: its files do not match their recorded "
        "digests (extra: extra.py; changed: helper.py); the hub's copy of this revision is "
        "damaged: publish the build again (or load another revision)")
    assert main(["info", REPO, "--version", "1", "--hub", str(hub.root)]) == 1
    out, err = capsys.readouterr()
    assert f"{said}\n" in out and "\\n" not in out, out
    assert err == (f"error: a load of {REPO} (variant torch-cpu) would be "
                   f"{said.removeprefix('trust: ')}\n"), err


def test_tampered_local_build_is_refused(tmp_path: Path) -> None:
    vdir = make_variant(tmp_path / "p", "torch-cpu", module_id=uid("lt"))
    (vdir / "helper.py").write_text("evil = 1\n")
    with pytest.raises(IntegrityError, match="changed: helper.py"):
        loader.get_local_kernel(tmp_path / "p")


def test_hub_records_protect_builds_without_a_digest(hub: LocalHub, tmp_path: Path) -> None:
    c = publish(hub, tmp_path / "p", 1, torch_cpu={"module_id": uid("nd"), "with_digest": False})
    target = hub.variant_path(REPO, c, "torch-cpu") / "helper.py"
    target.chmod(0o644)
    target.write_text("evil = 1\n")
    with pytest.raises(IntegrityError, match="changed: helper.py"):
        loader.get_kernel(REPO, version=1, hub=hub)


# --- signed builds on a local hub ---------------------------------------------------------


def _add_to_revision(hub: LocalHub, repo: str, commit: str, rel: str, data: bytes) -> None:
    """Write a file into a published revision and its record, as anyone who can write
    the hub directory could (the record is not signed)."""
    import json

    from kernelforge.digest import b64_sha256

    obj = hub.root / repo / "objects" / commit
    target = obj / rel
    if target.exists():
        target.chmod(0o644)
    target.write_bytes(data)
    record = json.loads((obj / ".commit.json").read_text())
    record["files"][rel] = b64_sha256(data)
    (obj / ".commit.json").write_text(json.dumps(record))


@pytest.fixture
def signer(tmp_path: Path):
    from kernelforge import signing, trust

    key = signing.generate_key(tmp_path / "alice.pem")
    trust.add_key(key.public.text, name="alice", repos=("kernels-test/*",))
    return key


def test_signed_build_without_digest_is_refused_on_a_local_hub(
    hub: LocalHub, tmp_path: Path, signer
) -> None:
    from kernelforge.errors import TrustError

    repo = "kernels-test/nodigest"
    make_variant(tmp_path / "p", "torch-cpu", module_id=uid("nds"), value=5,
                 with_digest=False)
    commit = hub.publish(repo, tmp_path / "p", version=1).commit
    # your own digest-less build loads on the owner mark, which covers every file
    assert "published to this local hub by you" in loader.kernel_info(
        repo, version=1, hub=hub).trust
    assert loader.get_kernel(repo, version=1, hub=hub, backend="cpu").VALUE == 5
    meta = (hub.variant_path(repo, commit, "torch-cpu") / "metadata.json").read_bytes()
    # a signature over the digest-less metadata (publish --sign refuses to make one),
    # then the code swapped: the signature still verifies, the owner mark no longer does
    _add_to_revision(hub, repo, commit, "build/torch-cpu.sig",
                     signer.sign_variant("torch-cpu", meta, repo_id=repo))
    _add_to_revision(hub, repo, commit, "build/torch-cpu/__init__.py", b"VALUE = 666\n")
    said = loader.kernel_info(repo, version=1, hub=hub).trust  # says what the load does
    assert said.startswith("trust: refused") and "records no file digests" in said, said
    with pytest.raises(TrustError, match="signed metadata.json records no file digests"):
        loader.get_kernel(repo, version=1, hub=hub)


def test_a_signed_build_without_digest_is_locked_only_when_allowed(
    hub: LocalHub, tmp_path: Path, signer
) -> None:
    """The signature covers no code, so ``kernelforge lock`` would pin whatever files the
    hub holds now: it refuses, as a load does, unless the repository is allowed."""
    from kernelforge.errors import TrustError
    from kernelforge.lock import lock_project

    repo = "kernels-test/nodigest"
    make_variant(tmp_path / "p", "torch-cpu", module_id=uid("ndl"), value=5,
                 with_digest=False)
    commit = hub.publish(repo, tmp_path / "p", version=1).commit
    meta = (hub.variant_path(repo, commit, "torch-cpu") / "metadata.json").read_bytes()
    _add_to_revision(hub, repo, commit, "build/torch-cpu.sig",
                     signer.sign_variant("torch-cpu", meta, repo_id=repo))
    _add_to_revision(hub, repo, commit, "build/torch-cpu/__init__.py", b"VALUE = 666\n")
    project = tmp_path / "proj"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "x"\nversion = "0"\n[tool.kernelforge.dependencies]\n"{repo}" = 1\n')
    with pytest.raises(TrustError, match="records no file digests, so the signature does not "
                       r"cover the code, .* refusing to lock it .* --allow kernels-test/nodigest"):
        lock_project(project, hub=hub)
    assert not (project / "kernelforge.lock").exists()
    lock = lock_project(project, hub=hub, allow=[repo]).path  # pinned as it is, by choice
    assert loader.load_kernel(repo, lockfile=lock, hub=hub).VALUE == 666


@pytest.mark.parametrize("owned", [False, True])
def test_a_build_copied_to_another_version_branch_is_refused(
    hub: LocalHub, tmp_path: Path, signer, monkeypatch, owned: bool
) -> None:
    from kernelforge.errors import TrustError

    repo = f"kernels-test/replay{int(owned)}"
    make_variant(tmp_path / "p", "torch-cpu", module_id=uid("rp"), value=1)
    commit = hub.publish(repo, tmp_path / "p", version=1, signer=signer).commit
    ref = hub.root / repo / "refs" / "heads" / "v7"
    ref.write_text(commit + "\n")  # v1's signed build served as v7
    if not owned:  # another user: the owner mark cannot vouch, the signature does
        from kernelforge import trust

        monkeypatch.setenv("KERNELFORGE_CONFIG", str(tmp_path / "other-config"))
        trust.add_key(signer.public.text, name="alice", repos=("kernels-test/*",))
    vouch = "published by you" if owned else f"signed by {signer.public.key_id}"
    # kernel_info says what the load will do
    said = loader.kernel_info(repo, version=7, hub=hub).trust
    assert said.startswith("trust: refused") and "branch v7 serves a build" in said, said
    assert "allowed" in loader.kernel_info(repo, version=1, hub=hub).trust
    with pytest.raises(TrustError, match=f"branch v7 serves a build {vouch} as version 1"):
        loader.get_kernel(repo, version=7, hub=hub)
    with pytest.raises(TrustError, match="branch v7"):
        loader.get_kernel(repo, revision="v7", hub=hub)
    assert loader.get_kernel(repo, version=1, hub=hub).VALUE == 1


def test_a_signed_build_that_records_no_version_is_refused_on_a_version_branch(
    hub: LocalHub, tmp_path: Path, signer, monkeypatch
) -> None:
    """Without a version in its metadata, nothing shows that a signed build on branch vN
    was published as version N, not copied there from another version. A build you
    published unsigned with no version (Hugging Face's builds of old record none) loads
    as before, for you."""
    from kernelforge import trust
    from kernelforge.errors import TrustError

    repo = "kernels-test/noversion"
    make_variant(tmp_path / "p", "torch-cpu", module_id=uid("nv"), value=1, version=None)
    commit = hub.publish(repo, tmp_path / "p", version=1).commit  # publish --sign refuses
    meta = (hub.variant_path(repo, commit, "torch-cpu") / "metadata.json").read_bytes()
    _add_to_revision(hub, repo, commit, "build/torch-cpu.sig",
                     signer.sign_variant("torch-cpu", meta, repo_id=repo))
    (hub.root / repo / "refs" / "heads" / "v2").write_text(commit + "\n")
    mine = os.environ["KERNELFORGE_CONFIG"]
    monkeypatch.setenv("KERNELFORGE_CONFIG", str(tmp_path / "other-config"))  # another user
    trust.add_key(signer.public.text, name="alice", repos=("kernels-test/*",))
    for version in (1, 2):
        with pytest.raises(TrustError, match=r"signed metadata.json records no version "
                           r".*refusing to load it"):
            loader.get_kernel(repo, version=version, hub=hub)
    monkeypatch.setenv("KERNELFORGE_CONFIG", mine)
    make_variant(tmp_path / "q", "torch-cpu", module_id=uid("nv"), value=2, version=None)
    hub.publish("kernels-test/noversion-mine", tmp_path / "q", version=1)  # unsigned
    assert loader.get_kernel("kernels-test/noversion-mine", version=1, hub=hub).VALUE == 2

def test_a_signed_build_that_records_no_version_is_not_locked_from_a_version_branch(
    hub: LocalHub, tmp_path: Path, signer, monkeypatch
) -> None:
    """A load from branch v2 refuses a signed build that records no version (it may be
    a build of v1 copied there); 'kernelforge lock' of version 2 refuses to pin it too,
    since a locked load reads no branch and would then load it for good. Allowing the
    repository pins it as it is."""
    from kernelforge import trust
    from kernelforge.errors import TrustError
    from kernelforge.lock import lock_project

    repo = "kernels-test/noversion-lock"
    make_variant(tmp_path / "p", "torch-cpu", module_id=uid("nvl"), value=1, version=None)
    commit = hub.publish(repo, tmp_path / "p", version=1).commit  # publish --sign refuses
    meta = (hub.variant_path(repo, commit, "torch-cpu") / "metadata.json").read_bytes()
    _add_to_revision(hub, repo, commit, "build/torch-cpu.sig",
                     signer.sign_variant("torch-cpu", meta, repo_id=repo))
    (hub.root / repo / "refs" / "heads" / "v2").write_text(commit + "\n")  # replayed as v2
    monkeypatch.setenv("KERNELFORGE_CONFIG", str(tmp_path / "other-config"))  # another user
    trust.add_key(signer.public.text, name="alice", repos=("kernels-test/*",))
    with pytest.raises(TrustError, match="records no version"):
        loader.get_kernel(repo, version=2, hub=hub)
    project = tmp_path / "proj"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "x"\nversion = "0"\n[tool.kernelforge.dependencies]\n"{repo}" = 2\n')
    with pytest.raises(TrustError, match=r"records no version .* copied there from another "
                       r"version.* refusing to lock it .* --allow kernels-test/noversion-lock"):
        lock_project(project, hub=hub)
    assert not (project / "kernelforge.lock").exists()
    lock = lock_project(project, hub=hub, allow=[repo]).path  # pinned as it is, by choice
    assert loader.load_kernel(repo, lockfile=lock, hub=hub).VALUE == 1


def test_a_signed_build_copied_to_another_repository_is_refused(
    hub: LocalHub, tmp_path: Path, signer, monkeypatch
) -> None:
    """The key is trusted for both repositories, but its signature names the one the
    build was published to: copied into the other (by whoever can write there), it no
    longer vouches for it."""
    import shutil

    from kernelforge import trust
    from kernelforge.errors import TrustError

    source, target = "kernels-test/sign-a", "kernels-test/sign-b"
    make_variant(tmp_path / "a", "torch-cpu", module_id=uid("cpa"), value=1)
    signed = hub.publish(source, tmp_path / "a", version=1, signer=signer).commit
    make_variant(tmp_path / "b", "torch-cpu", module_id=uid("cpb"), value=2)
    other = hub.publish(target, tmp_path / "b", version=1).commit
    copied = hub.variant_path(source, signed, "torch-cpu")
    dest = hub.variant_path(target, other, "torch-cpu")
    for path in dest.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    dest.chmod(0o755)
    shutil.rmtree(dest)
    shutil.copytree(copied, dest)
    for rel in ("build/torch-cpu.sig", *(f"build/torch-cpu/{f.relative_to(copied)}"
                                         for f in copied.rglob("*") if f.is_file())):
        _add_to_revision(hub, target, other, rel,
                         (hub.root / source / "objects" / signed / rel).read_bytes())
    monkeypatch.setenv("KERNELFORGE_CONFIG", str(tmp_path / "other-config"))  # not the owner
    trust.add_key(signer.public.text, name="alice", repos=("kernels-test/*",))
    assert loader.get_kernel(source, version=1, hub=hub).VALUE == 1
    said = loader.kernel_info(target, version=1, hub=hub).trust
    assert said.startswith("trust: refused"), said
    assert f"for {source}, not for {target}: a build copied from another repository" in said
    with pytest.raises(TrustError, match="copied from another repository"):
        loader.get_kernel(target, version=1, hub=hub)


# --- local builds and overrides ----------------------------------------------------------


def test_get_local_kernel_accepts_project_build_or_variant(
    tmp_path: Path, arch_variant: str
) -> None:
    module_id = uid("loc")
    make_variant(tmp_path / "p", arch_variant, module_id=module_id, with_digest=False)
    by_project = loader.get_local_kernel(tmp_path / "p")
    assert by_project.__name__ == module_id
    assert loader.get_local_kernel(tmp_path / "p" / "build") is by_project
    assert loader.get_local_kernel(tmp_path / "p" / "build" / arch_variant) is by_project
    with pytest.raises(HubError, match="does not exist"):
        loader.get_local_kernel(tmp_path / "missing")


def test_get_local_kernel_says_what_the_path_is_when_it_holds_no_build(tmp_path: Path) -> None:
    """An unbuilt project is told to build, a file is called a file, and a directory
    without variants says so; none lists the source folders as rejected variants."""
    project = tmp_path / "never-built"
    for folder in ("relu_cpu", "torch-ext/relu"):
        (project / folder).mkdir(parents=True)
    (project / "build.toml").write_text('[general]\nname = "relu"\n')
    with pytest.raises(HubError) as info:
        loader.get_local_kernel(project)
    assert str(info.value) == (f"path: {project} is a kernel project without a build/ "
                               f"directory; build it first (kernelforge build {project})")
    with pytest.raises(HubError, match=r"build\.toml is a file, not a directory \(expected a "
                                       "project with build/"):
        loader.get_local_kernel(project / "build.toml")
    (project / "build").mkdir()  # built, but nothing in it
    with pytest.raises(HubError, match=r"build holds no build variant \(no subdirectory with a "
                                       "metadata.json"):
        loader.get_local_kernel(project)
    with pytest.raises(HubError, match="relu_cpu holds no build variant"):
        loader.get_local_kernel(project / "relu_cpu")


def test_variant_dir_under_any_name_loads_when_given_directly(tmp_path: Path) -> None:
    vdir = make_variant(tmp_path / "p", "torch-cpu", module_id=uid("renamed"))
    renamed = vdir.rename(tmp_path / "my-kernel")
    assert loader.get_local_kernel(renamed).VALUE == 1
    # under build/, names are variant names: an unknown one is rejected with a reason
    (tmp_path / "q" / "build").mkdir(parents=True)
    make_variant(tmp_path / "q", "torch-cpu", module_id=uid("q")).rename(
        tmp_path / "q" / "build" / "my-kernel")
    with pytest.raises(VariantNotFoundError, match="my-kernel: rejected"):
        loader.get_local_kernel(tmp_path / "q")


def test_local_kernels_override(hub: LocalHub, tmp_path: Path, monkeypatch) -> None:
    publish(hub, tmp_path / "hubbed", 1, torch_cpu={"module_id": uid("hub"), "value": 1})
    make_variant(tmp_path / "other", "torch-cpu", module_id=uid("other"), value=2)
    hub.publish("other/kernel", tmp_path / "other", version=1)
    assert loader.has_kernel("other/kernel", hub=hub)  # in the hub, before the override
    local_id = uid("override")
    make_variant(tmp_path / "dev", "torch-cpu", module_id=local_id, value=99)
    monkeypatch.setenv("LOCAL_KERNELS", f"other/kernel=/nowhere:{REPO}={tmp_path / 'dev'}")
    module = loader.get_kernel(REPO, version=1, hub=hub)
    assert (module.__name__, module.VALUE) == (local_id, 99)
    info = loader.kernel_info(REPO, hub=hub)
    assert (info.source, info.commit, info.repo) == ("local", None, REPO)
    # mapped to a missing path: the override wins over the hub's build
    assert not loader.has_kernel("other/kernel", hub=hub)
    monkeypatch.delenv("LOCAL_KERNELS")
    assert loader.get_kernel(REPO, version=1, hub=hub).VALUE == 1  # read at call time


@pytest.mark.parametrize(
    ("value", "entry"),
    [("kernels-test/relu", "kernels-test/relu"), ("a/b=/x:justapath", "justapath"),
     ("bad id=/x", "bad id=/x"), ("a/b=", "a/b=")],
)
def test_malformed_local_kernels_name_the_entry(hub: LocalHub, monkeypatch, value, entry) -> None:
    monkeypatch.setenv("LOCAL_KERNELS", value)
    with pytest.raises(ValueError, match=f"LOCAL_KERNELS: malformed entry '{entry}'"):
        loader.get_kernel(REPO, hub=hub)


# --- has_kernel and errors ---------------------------------------------------------------


def test_a_repository_not_in_the_default_local_hub_says_so_in_the_hub_error(
    tmp_path: Path, monkeypatch
) -> None:
    """With no hub named, a load looks in the local hub, then on the Hugging Face Hub: a
    mistyped name must not read as a mere network problem of the second."""
    from kernelforge.hub import local as local_hub

    root = tmp_path / "default-hub"
    monkeypatch.delenv("KERNELFORGE_HUB", raising=False)
    monkeypatch.setattr(local_hub, "default_root", lambda: root)
    monkeypatch.setenv("KERNELFORGE_CACHE", str(tmp_path / "downloads"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no network in the tests
    publish(LocalHub(root), tmp_path / "p", torch_cpu={"module_id": uid("dflt")})
    said = (f"repository 'kernels-test/relx' is not in the local hub {root} (it holds: "
            f"{REPO}; did you mean '{REPO}'?), so the Hugging Face Hub was asked: ")
    for call in (loader.get_kernel, loader.kernel_info):
        with pytest.raises(HubError) as info:
            call("kernels-test/relx")
        assert str(info.value).startswith(said), str(info.value)
        assert "HF_HUB_OFFLINE" in str(info.value)  # the Hugging Face Hub's own error
    assert loader.has_kernel("kernels-test/relx") is False
    with pytest.raises(HubError) as info:  # a shared organization is not enough to suggest
        loader.get_kernel("kernels-test/nope")
    assert f"(it holds: {REPO}), so the Hugging Face Hub was asked" in str(info.value)
    assert loader.get_kernel(REPO).__name__.startswith("_relu_dflt_")  # the local hub's
    # a hub named explicitly was the only one asked: its error alone
    with pytest.raises(HubError) as info:
        loader.get_kernel("kernels-test/relx", hub="hf")
    assert "local hub" not in str(info.value)
    monkeypatch.setattr(local_hub, "default_root", lambda: tmp_path / "empty-hub")
    with pytest.raises(HubError, match=r"is not in the local hub .*empty-hub \(it holds no "
                                       r"repositories: 'kernelforge publish PROJECT --repo "
                                       r"kernels-test/relx' publishes a build there\), so "
                                       r"the Hugging Face Hub was asked"):
        loader.get_kernel("kernels-test/relx")


def test_has_kernel(hub: LocalHub, tmp_path: Path) -> None:
    assert loader.has_kernel(REPO, hub=hub) is False  # empty hub, not even a directory
    publish(hub, tmp_path / "p", 1, torch_cpu={"module_id": uid("h")})
    assert loader.has_kernel(REPO, hub=hub) is True
    assert loader.has_kernel(REPO, version=1, hub=hub) is True
    assert loader.has_kernel(REPO, version=2, hub=hub) is False
    assert loader.has_kernel(REPO, revision="deadbeef", hub=hub) is False
    assert loader.has_kernel("kernels-test/other", hub=hub) is False
    with pytest.raises(ValueError, match="revision and version"):
        loader.has_kernel(REPO, revision="v1", version=1, hub=hub)


def test_notes_are_kept_on_every_python() -> None:
    """The context a failed load adds reaches ``__notes__`` on Python 3.10 too, which has
    no ``add_note``, after notes already there and in the order added."""
    err = RuntimeError("kernel init failed")
    err.__notes__ = ["theirs"]  # type: ignore[attr-defined]
    loader._add_note(err, "first")
    loader._add_note(err, "second")
    assert err.__notes__ == ["theirs", "first", "second"]  # type: ignore[attr-defined]
    fresh = ValueError("x")
    loader._add_note(fresh, "only")
    assert fresh.__notes__ == ["only"]  # type: ignore[attr-defined]


def test_failed_import_leaves_no_module_behind(tmp_path: Path) -> None:
    module_id = uid("boom")
    make_variant(tmp_path / "p", "torch-cpu", module_id=module_id, with_digest=False,
                 init="from . import helper\nraise RuntimeError('kernel init failed')\n")
    with pytest.raises(RuntimeError, match="kernel init failed") as info:
        loader.get_local_kernel(tmp_path / "p")
    assert any(module_id in note for note in info.value.__notes__)
    assert module_id not in sys.modules and f"{module_id}.helper" not in sys.modules
    (tmp_path / "p" / "build" / "torch-cpu" / "__init__.py").write_text("VALUE = 5\n")
    assert loader.get_local_kernel(tmp_path / "p").VALUE == 5  # a retry imports afresh


def test_same_id_different_build_is_refused(tmp_path: Path) -> None:
    module_id = uid("dup")
    make_variant(tmp_path / "a", "torch-cpu", module_id=module_id, value=1)
    make_variant(tmp_path / "b", "torch-cpu", module_id=module_id, value=2)
    make_variant(tmp_path / "c", "torch-cpu", module_id=module_id, value=1)
    first = loader.get_local_kernel(tmp_path / "a")
    assert loader.get_local_kernel(tmp_path / "c") is first  # identical files: same module
    with pytest.raises(ImportError, match="a different build with the same id"):
        loader.get_local_kernel(tmp_path / "b")


def test_module_name_taken_by_something_else(tmp_path: Path) -> None:
    make_variant(tmp_path / "p", "torch-cpu", module_id="json")
    with pytest.raises(ImportError, match="already taken"):
        loader.get_local_kernel(tmp_path / "p")


def test_importing_the_loader_does_not_import_torch() -> None:
    code = "import sys, kernelforge.loader, kernelforge.hub; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_load_from_the_local_hub_imports_no_writing_or_lock_file_code(
        hub: LocalHub, tmp_path: Path) -> None:
    """Reading a local hub takes no file lock and a load without a lock file reads none:
    filelock (whose import takes as long as the loader's own) and the lock-file module
    are imported only where a publish or a locked load needs them."""
    module_id = uid("light")
    publish(hub, tmp_path / "p", torch_universal={"module_id": module_id, "value": 3})
    code = ("import sys, kernelforge\n"
            f"k = kernelforge.get_kernel({REPO!r}, version=1, hub={str(hub.root)!r})\n"
            "print(k.VALUE, [m for m in ('filelock', 'kernelforge.lock') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "3 []"


def test_has_kernel_answers_for_a_backend_this_torch_cannot_use(
    hub: LocalHub, tmp_path: Path
) -> None:
    publish(hub, tmp_path / "p", 1, torch_cpu={"module_id": uid("hb")})
    assert variants.detect_system().backend == "cpu"  # the cpu_system fixture
    with pytest.raises(VariantError, match="cannot be used here"):
        loader.get_kernel(REPO, version=1, hub=hub, backend="cuda")
    assert loader.has_kernel(REPO, version=1, hub=hub, backend="cuda") is False
    assert loader.has_kernel(REPO, version=1, hub=hub, backend="cpu") is True
    with pytest.raises(ValueError, match=r"backend: unknown backend 'cdua'; expected one of "
                       r".*\(did you mean 'cuda'\?\)"):
        loader.has_kernel(REPO, version=1, hub=hub, backend="cdua")


def test_has_kernel_takes_trust_remote_code_as_hf_kernels_does(hub: LocalHub,
                                                               tmp_path: Path) -> None:
    # (the signatures are compared in test_loader_hf_signatures.py)
    publish(hub, tmp_path / "p", 1, torch_cpu={"module_id": uid("htr")})
    assert loader.has_kernel(REPO, version=1, hub=hub, trust_remote_code=True) is True
    assert loader.has_kernel(REPO, version=1, hub=hub, trust_remote_code=[REPO]) is True
    with pytest.raises(TypeError, match="trust_remote_code"):
        loader.has_kernel(REPO, version=1, hub=hub, trust_remote_code="yes")  # type: ignore[arg-type]


# --- another loader got there first ------------------------------------------------------


def test_a_build_hf_kernels_loaded_is_reused(hub: LocalHub, tmp_path: Path) -> None:
    kernels = pytest.importorskip("kernels")
    module_id = uid("hfk")
    make_variant(tmp_path / "p", "torch-cpu", module_id=module_id)
    theirs = kernels.get_local_kernel(tmp_path / "p")
    assert theirs.__name__ == module_id
    hub.publish(REPO, tmp_path / "p", version=1)
    assert loader.get_kernel(REPO, version=1, hub=hub) is theirs  # the same files
    assert loader.get_local_kernel(tmp_path / "p") is theirs


def test_a_different_build_another_loader_holds_is_refused(
    hub: LocalHub, tmp_path: Path
) -> None:
    import importlib.util

    module_id = uid("other")
    elsewhere = make_variant(tmp_path / "theirs", "torch-cpu", module_id=module_id, value=1)
    spec = importlib.util.spec_from_file_location(module_id, elsewhere / "__init__.py")
    assert spec is not None and spec.loader is not None
    sys.modules[module_id] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules[module_id])
    publish(hub, tmp_path / "ours", 1, torch_cpu={"module_id": module_id, "value": 2})
    with pytest.raises(ImportError, match="another loader .* already imported a build with "
                                          "different files under that name from "
                                          + re.escape(str(elsewhere))):
        loader.get_kernel(REPO, version=1, hub=hub)
    assert sys.modules[module_id].VALUE == 1  # left alone


def test_a_build_hf_kernels_loaded_from_its_linked_cache_is_reused(
    hub: LocalHub, tmp_path: Path
) -> None:
    """Hugging Face's download cache holds each file as a link to a blob; the same files
    through links are still the same build."""
    kernels = pytest.importorskip("kernels")
    module_id = uid("hfl")
    src = make_variant(tmp_path / "p", "torch-cpu", module_id=module_id)
    linked, blobs = tmp_path / "snap" / "build" / "torch-cpu", tmp_path / "blobs"
    linked.mkdir(parents=True)
    blobs.mkdir()
    for f in src.iterdir():
        (blobs / f.name).write_bytes(f.read_bytes())
        (linked / f.name).symlink_to(blobs / f.name)
    theirs = kernels.get_local_kernel(tmp_path / "snap")
    assert theirs.__name__ == module_id
    hub.publish(REPO, tmp_path / "p", version=1)
    assert loader.get_kernel(REPO, version=1, hub=hub) is theirs


# --- kernel-depends ----------------------------------------------------------------------


def _depends_on(vdir: Path, *deps: dict) -> None:
    """Add ``kernel-depends`` to a fabricated variant's metadata.json (which its digest
    leaves out)."""
    import json

    meta = json.loads((vdir / "metadata.json").read_text())
    meta["kernel-depends"] = list(deps)
    (vdir / "metadata.json").write_text(json.dumps(meta))


DEP = "kernels-test/dep"


def test_kernel_depends_are_loaded_first_and_reach_the_import(
    hub: LocalHub, tmp_path: Path, caplog
) -> None:
    """The dependency loads at the version the kernel's metadata pins, and no WARNING
    tells the caller, who asked for none, to pass version=2 for it."""
    pytest.importorskip("kernels.deps")
    caplog.set_level(logging.INFO, logger="kernelforge")
    make_variant(tmp_path / "dep", "torch-cpu", module_id=uid("dep"), value=7)
    hub.publish(DEP, tmp_path / "dep", version=1)
    make_variant(tmp_path / "dep2", "torch-cpu", module_id=uid("dep"), value=8, version=2)
    hub.publish(DEP, tmp_path / "dep2", version=2)
    main = make_variant(tmp_path / "main", "torch-cpu", module_id=uid("main"), init=(
        "import kernels\nDEP = kernels.get_kernel_dep('kernels-test/dep')\n"
        "VALUE = 2 * DEP.VALUE\n"))
    _depends_on(main, {"repo-id": DEP, "version": 1})
    hub.publish(REPO, tmp_path / "main", version=1)
    module = loader.get_kernel(REPO, version=1, hub=hub)
    assert module.VALUE == 14  # version 1 of the dependency, as pinned, not the newest
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert module.DEP is loader.get_kernel(DEP, version=1, hub=hub)
    assert loader.get_local_kernel(tmp_path / "main") is module  # the same files


def test_a_redirected_kernel_depends_entry_is_said(hub: LocalHub, tmp_path: Path,
                                                   caplog) -> None:
    """A redirect of a dependency is still logged at WARNING: the load takes another
    repository than the one the kernel's metadata names."""
    pytest.importorskip("kernels.deps")
    moved = "kernels-test/moved"
    make_variant(tmp_path / "dep", "torch-cpu", module_id=uid("mv"), value=3)
    hub.publish(moved, tmp_path / "dep", version=1)
    make_variant(tmp_path / "old", "torch-cpu", module_id=uid("mvo"))
    hub.publish(DEP, tmp_path / "old", version=1)
    hub.set_status(DEP, f'kind = "redirect"\ndestination = "{moved}"\n')
    main = make_variant(tmp_path / "main", "torch-cpu", module_id=uid("mvm"), init=(
        "import kernels\nVALUE = kernels.get_kernel_dep('kernels-test/dep').VALUE\n"))
    _depends_on(main, {"repo-id": DEP, "version": 1})
    hub.publish(REPO, tmp_path / "main", version=1)
    caplog.set_level(logging.INFO, logger="kernelforge")
    assert loader.get_kernel(REPO, version=1, hub=hub).VALUE == 3
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        f"kernelforge: {DEP} is redirected to {moved} (kernel-status.toml on main)"]


def test_a_kernel_depends_cycle_is_refused(hub: LocalHub, tmp_path: Path) -> None:
    pytest.importorskip("kernels.deps")
    a = make_variant(tmp_path / "a", "torch-cpu", module_id=uid("cyc"))
    _depends_on(a, {"repo-id": DEP, "version": 1})
    hub.publish(REPO, tmp_path / "a", version=1)
    b = make_variant(tmp_path / "b", "torch-cpu", module_id=uid("cyc"))
    _depends_on(b, {"repo-id": REPO, "version": 1})
    hub.publish(DEP, tmp_path / "b", version=1)
    with pytest.raises(HubError, match=f"cyclic kernel dependency: {REPO} -> {DEP} -> {REPO}"):
        loader.get_kernel(REPO, version=1, hub=hub)


def test_has_kernel_checks_the_kernel_depends_as_get_kernel_loads_them(
    hub: LocalHub, tmp_path: Path
) -> None:
    """get_kernel loads a kernel's kernel-depends first, so has_kernel answers for them
    too, as Hugging Face's kernels.has_kernel does: no when one has no build here, is
    missing, or closes a cycle."""
    main = make_variant(tmp_path / "main", "torch-cpu", module_id=uid("hkd"))
    _depends_on(main, {"repo-id": DEP, "version": 1})
    hub.publish(REPO, tmp_path / "main", version=1)
    assert loader.has_kernel(REPO, version=1, hub=hub) is False  # DEP is not in the hub
    make_variant(tmp_path / "cuda", "torch-cuda", module_id=uid("hkd"), backend="cuda")
    hub.publish(DEP, tmp_path / "cuda", version=1)  # DEP version 1: a cuda build only
    assert loader.has_kernel(DEP, version=1, hub=hub) is False
    assert loader.has_kernel(REPO, version=1, hub=hub) is False
    with pytest.raises(VariantNotFoundError):
        loader.get_kernel(REPO, version=1, hub=hub)
    back = make_variant(tmp_path / "back", "torch-cpu", module_id=uid("hkd"), version=2)
    _depends_on(back, {"repo-id": REPO, "version": 1})
    hub.publish(DEP, tmp_path / "back", version=2)
    _depends_on(main, {"repo-id": DEP, "version": 2})
    hub.publish(REPO, tmp_path / "main", version=1)  # REPO -> DEP@2 -> REPO@1: a cycle
    assert loader.has_kernel(REPO, version=1, hub=hub) is False
    _depends_on(back, {"repo-id": "kernels-test/leaf", "version": 1})
    hub.publish(DEP, tmp_path / "back", version=2)
    make_variant(tmp_path / "leaf", "torch-universal", module_id=uid("hkd"))
    hub.publish("kernels-test/leaf", tmp_path / "leaf", version=1)
    assert loader.has_kernel(REPO, version=1, hub=hub) is True  # REPO -> DEP@2 -> leaf


def test_has_kernel_looks_up_a_shared_kernel_depends_once(
    hub: LocalHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two layers of kernels that each depend on both kernels of the next: get_kernel
    locates each kernel once, has_kernel located the last one once per path to it (a
    lookup on the hub each time), which doubles with every layer."""
    layers = 4
    for i in range(layers, -1, -1):
        for n in "ab":
            vdir = make_variant(tmp_path / f"{n}{i}", "torch-cpu", module_id=uid("hkd"))
            if i < layers:
                _depends_on(vdir, {"repo-id": f"kernels-test/a{i + 1}", "version": 1},
                            {"repo-id": f"kernels-test/b{i + 1}", "version": 1})
            hub.publish(f"kernels-test/{n}{i}", tmp_path / f"{n}{i}", version=1)
    located: list[str] = []
    locate = loader._locate

    def counted(repo_id: str, *args: Any, **kwargs: Any) -> Any:
        located.append(repo_id)
        return locate(repo_id, *args, **kwargs)

    monkeypatch.setattr(loader, "_locate", counted)
    assert loader.has_kernel("kernels-test/a0", version=1, hub=hub) is True
    assert sorted(located) == sorted({*located}), located
    assert len(located) == 2 * layers + 1


@pytest.mark.parametrize("entry", [{"repo-id": DEP}, {"version": 1}, "kernels-test/dep",
                                   {"repo-id": DEP, "version": 1, "revision": "main"},
                                   {"repo-id": DEP, "version": "1"},
                                   {"repo-id": DEP, "version": True},
                                   {"repo-id": "no-org", "version": 1}])
def test_a_malformed_kernel_depends_entry_is_named(hub: LocalHub, tmp_path: Path,
                                                   entry: object) -> None:
    a = make_variant(tmp_path / "a", "torch-cpu", module_id=uid("bad"))
    _depends_on(a, entry)  # type: ignore[arg-type]
    hub.publish(REPO, tmp_path / "a", version=1)
    with pytest.raises(HubError, match="'kernel-depends': entry .* is not"):
        loader.get_kernel(REPO, version=1, hub=hub)


def test_an_unusable_backend_is_refused_before_a_version_is_chosen(
    hub: LocalHub, tmp_path: Path, caplog
) -> None:
    publish(hub, tmp_path / "p", 1, torch_cpu={"module_id": uid("be")})
    with caplog.at_level(logging.WARNING), pytest.raises(VariantError,
                                                         match="cannot be used here"):
        loader.get_kernel(REPO, hub=hub, backend="cuda")
    assert not [r for r in caplog.records if "loading" in r.getMessage()]


def test_one_repository_at_two_versions_is_not_a_cycle(hub: LocalHub, tmp_path: Path) -> None:
    """A -> DEP@2 -> MID -> DEP@1: two builds of DEP, loaded side by side (Hugging Face's
    resolver keys on repository and version too)."""
    pytest.importorskip("kernels.deps")
    mid = "kernels-test/mid"
    make_variant(tmp_path / "d1", "torch-cpu", module_id=uid("d1"), value=1)
    hub.publish(DEP, tmp_path / "d1", version=1)
    c = make_variant(tmp_path / "c", "torch-cpu", module_id=uid("c"), init=(
        "import kernels\nVALUE = kernels.get_kernel_dep('kernels-test/dep').VALUE\n"))
    _depends_on(c, {"repo-id": DEP, "version": 1})
    hub.publish(mid, tmp_path / "c", version=1)
    d2 = make_variant(tmp_path / "d2", "torch-cpu", module_id=uid("d2"), version=2, init=(
        "import kernels\nVALUE = 10 + kernels.get_kernel_dep('kernels-test/mid').VALUE\n"))
    _depends_on(d2, {"repo-id": mid, "version": 1})
    hub.publish(DEP, tmp_path / "d2", version=2)
    a = make_variant(tmp_path / "a", "torch-cpu", module_id=uid("a"), init=(
        "import kernels\nVALUE = 100 + kernels.get_kernel_dep('kernels-test/dep').VALUE\n"))
    _depends_on(a, {"repo-id": DEP, "version": 2})
    hub.publish(REPO, tmp_path / "a", version=1)
    assert loader.get_kernel(REPO, version=1, hub=hub).VALUE == 111


def _python_depends(vdir: Path, value: object) -> None:
    import json

    meta = json.loads((vdir / "metadata.json").read_text())
    meta["python-depends"] = value
    (vdir / "metadata.json").write_text(json.dumps(meta))


def test_missing_python_depends_are_named_before_the_import(hub: LocalHub,
                                                            tmp_path: Path) -> None:
    module_id = uid("pyd")
    vdir = make_variant(tmp_path / "a", "torch-cpu", module_id=module_id,
                        init="raise RuntimeError('imported')\n")
    _python_depends(vdir, ["nki", "einops"])
    hub.publish(REPO, tmp_path / "a", version=1)
    with pytest.raises(ImportError, match=r"needs the Python package\(s\) nki, einops .*"
                                          r"fix: pip install nki einops"):
        loader.get_kernel(REPO, version=1, hub=hub)
    assert module_id not in sys.modules


def test_a_missing_dotted_python_depends_is_named_with_its_pip_install(
        hub: LocalHub, tmp_path: Path) -> None:
    """A distribution named with a dot (``ruamel.yaml``, ``zope.interface``) whose top
    package is absent: refused with the ``pip install``, not a bare ModuleNotFoundError
    about the top package."""
    vdir = make_variant(tmp_path / "a", "torch-cpu", module_id=uid("pyd"))
    _python_depends(vdir, ["kf-absent-ns.sub-pkg", "einops"])
    hub.publish(REPO, tmp_path / "a", version=1)
    with pytest.raises(ImportError, match=r"needs the Python package\(s\) "
                                          r"kf-absent-ns.sub-pkg, einops .*fix: pip install "
                                          r"kf-absent-ns.sub-pkg einops$"):
        loader.get_kernel(REPO, version=1, hub=hub)


def test_installed_python_depends_load(hub: LocalHub, tmp_path: Path) -> None:
    vdir = make_variant(tmp_path / "a", "torch-cpu", module_id=uid("pyd"))
    _python_depends(vdir, ["packaging"])  # not a listed name: taken as package and module
    hub.publish(REPO, tmp_path / "a", version=1)
    assert loader.get_kernel(REPO, version=1, hub=hub).VALUE == 1


def test_malformed_python_depends_is_named(hub: LocalHub, tmp_path: Path) -> None:
    vdir = make_variant(tmp_path / "a", "torch-cpu", module_id=uid("pyd"))
    _python_depends(vdir, "einops")
    hub.publish(REPO, tmp_path / "a", version=1)
    with pytest.raises(HubError, match="'python-depends' must be a list of names"):
        loader.get_kernel(REPO, version=1, hub=hub)


def test_a_failed_dependency_load_leaves_no_trace_for_the_next_load(
    hub: LocalHub, tmp_path: Path
) -> None:
    """After REPO's dependency fails to load, a kernel that depends on REPO is no
    'cycle': the failed load's chain is gone."""
    pytest.importorskip("kernels.deps")
    a = make_variant(tmp_path / "a", "torch-cpu", module_id=uid("fail"))
    _depends_on(a, {"repo-id": "kernels-test/missing", "version": 1})
    hub.publish(REPO, tmp_path / "a", version=1)
    with pytest.raises(HubError, match="kernels-test/missing"):
        loader.get_kernel(REPO, version=1, hub=hub)
    b = make_variant(tmp_path / "b", "torch-cpu", module_id=uid("after"))
    _depends_on(b, {"repo-id": REPO, "version": 1})
    hub.publish(DEP, tmp_path / "b", version=1)
    with pytest.raises(HubError) as info:
        loader.get_kernel(DEP, version=1, hub=hub)
    assert "cyclic" not in str(info.value) and "kernels-test/missing" in str(info.value)


# --- errors that environment variables caused name them --------------------------------


def test_a_local_kernels_entry_naming_a_missing_path_is_named(tmp_path: Path,
                                                               monkeypatch) -> None:
    """The user passed no path: the error names the LOCAL_KERNELS entry that gave it."""
    missing = tmp_path / "nosuch"
    monkeypatch.setenv("LOCAL_KERNELS", f"{REPO}={missing}")
    for call in (loader.get_kernel, loader.kernel_info):
        with pytest.raises(HubError) as info:
            call(REPO)
        assert str(info.value).startswith(
            f"LOCAL_KERNELS entry {REPO}={missing}: {missing} does not exist"), info.value
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("LOCAL_KERNELS", f"{REPO}={tmp_path / 'empty'}")
    with pytest.raises(HubError, match=r"^LOCAL_KERNELS entry .*holds no build variant"):
        loader.get_kernel(REPO)
    # a path passed to get_local_kernel is the caller's own: no variable to name
    with pytest.raises(HubError, match=r"^path: .*nosuch does not exist"):
        loader.get_local_kernel(missing)


def test_a_kernelforge_hub_naming_a_missing_directory_is_named(tmp_path: Path,
                                                                monkeypatch) -> None:
    typo = tmp_path / "typo-hub"
    monkeypatch.setenv("KERNELFORGE_HUB", str(typo))
    for call in (loader.get_kernel, loader.kernel_info):
        with pytest.raises(HubError) as info:
            call(REPO)
        said = str(info.value)
        assert said.startswith(f"KERNELFORGE_HUB={typo} chose the local hub {typo}: "), said
        assert "does not exist" in said, said
    with pytest.raises(HubError) as info:  # the same directory passed as hub=: no variable
        loader.get_kernel(REPO, hub=str(typo))
    assert "KERNELFORGE_HUB" not in str(info.value)


def test_kernelforge_hub_hf_is_named_when_the_local_hub_holds_the_repository(
    tmp_path: Path, monkeypatch
) -> None:
    from kernelforge.hub import local as local_hub

    root = tmp_path / "default-hub"
    monkeypatch.setattr(local_hub, "default_root", lambda: root)
    monkeypatch.setenv("KERNELFORGE_CACHE", str(tmp_path / "downloads"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no network in the tests
    publish(LocalHub(root), tmp_path / "p", torch_cpu={"module_id": uid("hfenv")})
    monkeypatch.setenv("KERNELFORGE_HUB", "hf")
    with pytest.raises(HubError) as info:
        loader.kernel_info(REPO)
    said = str(info.value)
    assert said.startswith(
        f"KERNELFORGE_HUB=hf chose the Hugging Face Hub (the local hub {root} holds {REPO}: "
        "unset KERNELFORGE_HUB to load it from there): "), said
    assert "HF_HUB_OFFLINE" in said  # the Hugging Face Hub's own error follows
    with pytest.raises(HubError) as info:  # named by the caller: its error alone
        loader.kernel_info(REPO, hub="hf")
    assert "KERNELFORGE_HUB" not in str(info.value)
    monkeypatch.delenv("KERNELFORGE_HUB")
    assert loader.kernel_info(REPO).source == "hub"  # the local hub's


def test_a_local_kernels_build_of_another_version_than_asked_is_warned_about(
    tmp_path: Path, monkeypatch, caplog, capsys
) -> None:
    """LOCAL_KERNELS stands in for every version: a version= pin it does not match is said
    (a WARNING of the load, a note in kernel_info and `kernelforge info`), not silently
    ignored."""
    module_id = uid("lkv")
    make_variant(tmp_path / "v2", "torch-cpu", module_id=module_id, version=2)
    monkeypatch.setenv("LOCAL_KERNELS", f"{REPO}={tmp_path / 'v2'}")
    with caplog.at_level(logging.WARNING, logger="kernelforge"):
        assert loader.get_kernel(REPO, version=1).__name__ == module_id
    said = ("version=1 was asked for, but LOCAL_KERNELS names a build whose metadata.json "
            "records version 2")
    assert said in caplog.text, caplog.text
    # named as kernelforge's, as every WARNING of the library is (the note is not)
    assert caplog.records[0].getMessage().startswith(f"kernelforge: {REPO}: {said}")
    caplog.clear()
    # kernel_info and has_kernel load nothing: the note says it, no WARNING does
    with caplog.at_level(logging.WARNING, logger="kernelforge"):
        info = loader.kernel_info(REPO, version=1)
        assert loader.has_kernel(REPO, version=1)
    assert any(note.startswith(said) for note in info.notes), info.notes
    assert caplog.records == []
    from kernelforge.cli import main

    capsys.readouterr()
    assert main(["info", REPO, "--version", "1"]) == 0
    out, err = capsys.readouterr()
    assert f"  note: {said}" in out and said not in err, (out, err)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kernelforge"):
        loader.get_kernel(REPO, version=2)
        loader.get_kernel(REPO)
    assert "was asked for" not in caplog.text
    assert loader.kernel_info(REPO, version=2).notes == ()


def test_a_program_without_logging_sees_a_loads_warning_as_kernelforges(
        tmp_path: Path) -> None:
    """Python's last-resort handler writes a library's WARNING bare, without the logger's
    name, among the program's own output: the LOCAL_KERNELS line starts with
    'kernelforge: ', as the line saying which version a load took does."""
    make_variant(tmp_path / "v2", "torch-universal", module_id=uid("bare"), version=2)
    env = {**os.environ, "LOCAL_KERNELS": f"{REPO}={tmp_path / 'v2'}"}
    code = f"import kernelforge; kernelforge.get_kernel({REPO!r}, version=1)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    said = [line for line in out.stderr.splitlines() if "was asked for" in line]
    assert len(said) == 1 and said[0].startswith(
        f"kernelforge: {REPO}: version=1 was asked for, but LOCAL_KERNELS names"), out.stderr


def test_a_rebuild_in_this_process_is_what_the_next_load_gets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel author edits, rebuilds and loads again in one session (a notebook): the
    second get_local_kernel, or get_kernel through LOCAL_KERNELS, loads the new build,
    not the module of the first; an unchanged build is the same module."""
    from kernelforge.build import build_project

    project = write_noarch_project(tmp_path / "na")
    init = project / "torch-ext" / "na" / "__init__.py"
    init.write_text("VALUE = 1\n")
    build_project(project, backends=["cpu"], progress=lambda _: None)
    first = loader.get_local_kernel(project)
    assert first.VALUE == 1
    assert loader.get_local_kernel(project) is first
    monkeypatch.setenv("LOCAL_KERNELS", f"kernels-test/na={project}")
    assert loader.get_kernel("kernels-test/na") is first

    init.write_text("VALUE = 2\n")
    build_project(project, backends=["cpu"], progress=lambda _: None)
    second = loader.get_local_kernel(project)
    assert second.VALUE == 2 and second.__name__ != first.__name__
    assert loader.get_kernel("kernels-test/na") is second
    assert loader.get_local_kernel(project / "build" / "torch-cpu") is second


def test_a_rebuild_is_loaded_after_the_same_build_came_from_the_hub(tmp_path: Path) -> None:
    """Published, loaded from the hub, then developed with get_local_kernel: the local
    directory's own metadata.json is watched, not the hub copy's, which never changes."""
    from kernelforge.build import build_project

    project = write_noarch_project(tmp_path / "nb", name="nb")
    init = project / "torch-ext" / "nb" / "__init__.py"
    init.write_text("VALUE = 1\n")
    build_project(project, backends=["cpu"], progress=lambda _: None)
    hub = LocalHub(tmp_path / "hub")
    hub.publish("kernels-test/nb", project / "build", version=1)
    published = loader.get_kernel("kernels-test/nb", version=1, hub=hub)
    assert loader.get_local_kernel(project) is published  # the same build, one module
    init.write_text("VALUE = 2\n")
    build_project(project, backends=["cpu"], progress=lambda _: None)
    assert loader.get_local_kernel(project).VALUE == 2


def test_a_path_given_as_a_repository_id_points_to_get_local_kernel(
        tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-relu" / "build").mkdir(parents=True)
    for call in (loader.get_kernel, loader.kernel_info, loader.has_kernel):
        for given in ("my-relu", "./my-relu", Path("my-relu")):
            with pytest.raises(ValueError, match="is not a valid repository id|expected a "
                               "string") as info:
                call(given)  # type: ignore[arg-type]
            assert "to load a local build, use get_local_kernel('" in str(info.value)
    with pytest.raises(ValueError) as info:
        loader.get_kernel("no-such-dir")
    assert "get_local_kernel" not in str(info.value)
    # an id no path lookup can take is refused as an id, not with the lookup's error
    for given in ("~no-such-user-zq/org/name", "a" * 5000 + "/org/name"):
        with pytest.raises(ValueError, match="is not a valid repository id") as info:
            loader.get_kernel(given)
        assert "get_local_kernel" not in str(info.value)
