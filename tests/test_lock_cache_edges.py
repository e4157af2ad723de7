"""Lock files, the download cache and their commands at their edges: a signed build copied
onto another version's branch is not locked, a damaged cached single file is fetched
again, an offline lock says how old the refs it pins are, and the command line's errors
are one line each."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import time
from pathlib import Path

import pytest
from kf_sharing import FakeHfApi, isolate, make_variant, uid
from test_lock import project

from kernelforge import loader, signing, trust
from kernelforge.cli import main
from kernelforge.errors import HubError, IntegrityError, LockError, TrustError
from kernelforge.hub import LocalHub
from kernelforge.hub.hf import HfHub
from kernelforge.lock import download_locked, lock_project, read_lock, read_requirements

pytestmark = pytest.mark.usefixtures("cpu_system")

REPO = "kernels-test/relu"
OTHER = "kernels-test/other"


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path: Path) -> dict[str, Path]:
    return isolate(monkeypatch, tmp_path)


def _hf(tmp_path: Path, env: dict[str, Path], cache: Path | None = None) -> HfHub:
    return HfHub(api=FakeHfApi(tmp_path / "remote"), cache=cache or env["cache"])


def _use_hf(monkeypatch, tmp_path: Path, env: dict[str, Path]) -> None:
    """``--hub hf`` on the command line gets the fake Hugging Face Hub."""
    monkeypatch.setattr("kernelforge.hub.as_hub", lambda hub: _hf(tmp_path, env))


def _locked_and_downloaded(tmp_path: Path, env: dict[str, Path]
                           ) -> tuple[HfHub, str, Path, Path]:
    hf = _hf(tmp_path, env)
    make_variant(tmp_path / "b", "torch-cpu", module_id=uid("f"))
    commit = hf.publish(REPO, tmp_path / "b", version=1).commit
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    lock_project(root, hub=hf, allow=True)
    (_, _, path), = download_locked(root, hub=hf)
    return hf, commit, root, path


def _fix(commit: str) -> str:
    return f"'kernelforge cache remove {REPO} --revision {commit[:12]}'"


# --- a signed build copied onto another version's branch ----------------------------------


def test_lock_refuses_a_signed_build_replayed_onto_another_version_branch(
        tmp_path: Path, env, capsys) -> None:
    """Branch v2 pointed at the signed v1 build (push rights, no key): a load refuses it,
    and so does the lock, which a locked load trusts for the branch (it pinned nothing)."""
    hf = _hf(tmp_path, env)
    key = signing.generate_key(tmp_path / "k.pem")
    trust.add_key(key.public.text, name="ci", repos=("kernels-test/*",))
    make_variant(tmp_path / "b1", "torch-cpu", version=1, module_id=uid("o"), value=1)
    old = hf.publish(REPO, tmp_path / "b1", version=1, signer=key).commit
    make_variant(tmp_path / "b2", "torch-cpu", version=2, module_id=uid("n"), value=2)
    hf.publish(REPO, tmp_path / "b2", version=2, signer=key)
    api = hf._api
    api._set_ref(api._repo(REPO, "kernel"), "heads", "v2", old)
    with pytest.raises(TrustError, match="branch v2 serves a build signed by .* refusing to "
                       "load it"):
        loader.get_kernel(REPO, version=2, hub=_hf(tmp_path, env, tmp_path / "c2"))
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 2\n')
    with pytest.raises(TrustError, match=r"branch v2 serves a build signed by \S+ as "
                       r"version 1 .*refusing to lock it \(republish version 2, or depend "
                       "on version 1"):
        lock_project(root, hub=hf)
    assert not (root / "kernelforge.lock").exists()
    (root / "pyproject.toml").write_text(f'[tool.kernelforge.dependencies]\n"{REPO}" = ">=2"\n')
    with pytest.raises(TrustError, match="branch v2 serves a build"):
        lock_project(root, hub=hf)
    (root / "pyproject.toml").write_text(f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    assert lock_project(root, hub=hf).kernels[0].commit == old  # where it was published


def test_lock_refuses_a_replayed_dependency_naming_who_asks(tmp_path: Path, env) -> None:
    hub = LocalHub(env["hub"])
    make_variant(tmp_path / "o1", "torch-cpu", version=1, module_id=uid("o1"))
    old = hub.publish(OTHER, tmp_path / "o1", version=1).commit
    make_variant(tmp_path / "o2", "torch-cpu", version=2, module_id=uid("o2"))
    hub.publish(OTHER, tmp_path / "o2", version=2)
    (hub.root / OTHER / "refs" / "heads" / "v2").write_text(old + "\n")
    vdir = make_variant(tmp_path / "r", "torch-cpu", module_id=uid("r"))
    meta = json.loads((vdir / "metadata.json").read_text())
    meta["kernel-depends"] = [{"repo-id": OTHER, "version": 2}]
    (vdir / "metadata.json").write_text(json.dumps(meta))
    hub.publish(REPO, tmp_path / "r", version=1)
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    with pytest.raises(TrustError, match=rf"{OTHER} version 2, a kernel-depends entry of "
                       rf"{REPO} \(variant torch-cpu\): .*branch v2 serves a build published "
                       "by you as version 1"):
        lock_project(root)


# --- a damaged single file in the download cache -------------------------------------------


@pytest.mark.parametrize("garbage", [b"{trunc", b'{"id": "x"}'])
def test_a_damaged_cached_metadata_json_is_fetched_again_online(
        tmp_path: Path, env, capsys, monkeypatch, caplog, garbage: bytes) -> None:
    _hf_, commit, root, _path = _locked_and_downloaded(tmp_path, env)
    f = env["cache"] / "files" / REPO / commit / "build" / "torch-cpu" / "metadata.json"
    good = f.read_bytes()
    f.chmod(0o644)
    f.write_bytes(garbage)
    _use_hf(monkeypatch, tmp_path, env)
    with caplog.at_level(logging.WARNING):
        assert main(["download", str(root), "--hub", "hf"]) == 0, capsys.readouterr().err
    assert f.read_bytes() == good
    assert any("failed its check" in r.getMessage() and "fetching it again" in r.getMessage()
               for r in caplog.records)
    f.chmod(0o644)
    f.write_bytes(garbage)
    assert loader.get_locked_kernel(REPO, lockfile=root, hub=_hf(tmp_path, env)).VALUE == 1
    assert f.read_bytes() == good


def test_a_damaged_cached_metadata_json_offline_names_the_copy_and_the_fix(
        tmp_path: Path, env, monkeypatch) -> None:
    _hf_, commit, root, _path = _locked_and_downloaded(tmp_path, env)
    f = env["cache"] / "files" / REPO / commit / "build" / "torch-cpu" / "metadata.json"
    f.chmod(0o644)
    f.write_bytes(b'{"id": "x"}')
    with pytest.raises(IntegrityError) as info:
        loader.load_kernel(REPO, lockfile=root, hub=_hf(tmp_path, env))
    said = str(info.value)
    assert "it differs from the one the lock file pins" in said
    assert f"the download cache's copy {f} was changed since it was fetched" in said
    assert f"fix: {_fix(commit)}" in said


def test_a_metadata_json_the_hub_serves_unlike_the_lock_is_fetched_once(
        tmp_path: Path, env, monkeypatch, capsys) -> None:
    """A lock that disagrees with the hub (not a damaged cache): fetched again once, then
    refused as before."""
    _hf_, commit, root, _path = _locked_and_downloaded(tmp_path, env)
    doc = json.loads((root / "kernelforge.lock").read_text())
    doc["kernels"][REPO]["variants"]["torch-cpu"]["files"]["metadata.json"] = "A" * 43 + "="
    (root / "kernelforge.lock").write_text(json.dumps(doc))
    api = FakeHfApi(tmp_path / "remote")
    before = len(api.fetches())
    with pytest.raises(IntegrityError, match="it differs from the one the lock file pins"):
        loader.get_locked_kernel(REPO, lockfile=root, hub=_hf(tmp_path, env))
    assert len([f for f in api.fetches()[before:] if "metadata.json" in f]) == 1


def test_a_metadata_json_the_hub_serves_unlike_the_lock_names_the_lock_file(
        tmp_path: Path, env) -> None:
    """As for the variant's other files: fetching it again cannot help, so the error says
    that the hub serves it so and names the lock file, not a damaged download."""
    hf, commit, root, _path = _locked_and_downloaded(tmp_path, env)
    meta = hf._api.tree(REPO, commit) / "build" / "torch-cpu" / "metadata.json"
    hf._api.tamper(REPO, commit, "build/torch-cpu/metadata.json", meta.read_bytes() + b"\n")
    shutil.rmtree(env["cache"])
    lockfile = root / "kernelforge.lock"
    first = (rf"^refusing {REPO}@{commit[:12]}: build/torch-cpu/metadata.json: the Hugging "
             rf"Face Hub serves another metadata.json for the locked commit than "
             rf"{re.escape(str(lockfile))} pins:\n  changed: metadata.json .*\n"
             r".*fetching them again does not help.*run 'kernelforge lock' again$")
    with pytest.raises(IntegrityError, match=first):
        loader.get_locked_kernel(REPO, lockfile=root, hub=_hf(tmp_path, env))
    with pytest.raises(IntegrityError, match=first):  # its cached copy fetched again
        loader.get_locked_kernel(REPO, lockfile=root, hub=_hf(tmp_path, env))
    with pytest.raises(IntegrityError, match=first):
        download_locked(root, hub=_hf(tmp_path, env))


def test_an_unlocked_load_fetches_a_cached_metadata_json_that_does_not_parse_again(
        tmp_path: Path, env) -> None:
    hf = _hf(tmp_path, env)
    make_variant(tmp_path / "b", "torch-cpu", module_id=uid("u"))
    commit = hf.publish(REPO, tmp_path / "b", version=1).commit
    assert loader.get_kernel(REPO, version=1, hub=hf, trust_remote_code=True).VALUE == 1
    f = env["cache"] / "files" / REPO / commit / "build" / "torch-cpu" / "metadata.json"
    good = f.read_bytes()
    f.chmod(0o644)
    f.write_bytes(b"{trunc")
    assert loader.kernel_info(REPO, version=1, hub=_hf(tmp_path, env)).commit == commit
    assert f.read_bytes() == good
    f.chmod(0o644)
    f.write_bytes(b"{trunc")
    offline = HfHub(api=FakeHfApi(tmp_path / "remote"), cache=env["cache"], offline=True)
    with pytest.raises(HubError, match=rf"not valid JSON .*download cache's copy {f}, .*fix: "
                       f"{_fix(commit)}"):
        loader.kernel_info(REPO, version=1, hub=offline)


# --- offline locking -------------------------------------------------------------------


def test_an_offline_lock_warns_when_the_refs_it_pins_were_seen(
        tmp_path: Path, env, monkeypatch, capsys, caplog) -> None:
    hf = _hf(tmp_path, env)
    make_variant(tmp_path / "b1", "torch-cpu", module_id=uid("a"), value=1)
    a = hf.publish(REPO, tmp_path / "b1", version=1).commit
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    with caplog.at_level(logging.WARNING):
        lock_project(root, hub=hf, allow=True)  # online: refs cached, no warning
    assert not [r for r in caplog.records if "offline" in r.getMessage()]
    refs = json.loads((env["cache"] / "refs" / "kernels-test" / "relu.json").read_text())
    seen = time.strftime("on %Y-%m-%d at %H:%M", time.localtime(refs["time"]))
    make_variant(tmp_path / "b2", "torch-cpu", module_id=uid("b"), value=2)
    _hf(tmp_path, env, tmp_path / "elsewhere").publish(REPO, tmp_path / "b2", version=1)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _use_hf(monkeypatch, tmp_path, env)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert main(["lock", str(root), "--hub", "hf", "--trust-remote-code"]) == 0
    assert read_lock(root).require(REPO).commit == a  # still possible, on purpose
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1, said
    assert said[0].startswith(f"kernelforge: {REPO}: the Hugging Face Hub is offline "
                              "(HF_HUB_OFFLINE is "
                              "set), so the commit pinned is the one its branches and tags "
                              f"pointed to when the download cache last saw them online, {seen}")
    assert "run 'kernelforge lock' online" in said[0]


def test_an_offline_lock_of_a_commit_id_is_not_warned_about(
        tmp_path: Path, env, monkeypatch, caplog) -> None:
    hf = _hf(tmp_path, env)
    make_variant(tmp_path / "b1", "torch-cpu", module_id=uid("c"))
    a = hf.publish(REPO, tmp_path / "b1", version=1).commit
    text = f'[tool.kernelforge.dependencies]\n"{REPO}" = {{ revision = "{a.upper()}" }}\n'
    root = project(tmp_path, text)
    lock_project(root, hub=hf, allow=True)
    offline = HfHub(api=FakeHfApi(tmp_path / "remote"), cache=env["cache"], offline=True)
    with caplog.at_level(logging.WARNING):
        assert lock_project(root, hub=offline, allow=True).kernels[0].commit == a
    assert not [r for r in caplog.records if "offline" in r.getMessage()]


# --- what 'cache list' and offline loads say about a damaged entry ------------------------


def test_cache_list_marks_an_unreadable_entry_json(tmp_path: Path, env, capsys,
                                                   monkeypatch) -> None:
    _hf_, commit, root, path = _locked_and_downloaded(tmp_path, env)
    record = path.parent / "entry.json"
    record.chmod(0o644)
    record.write_text("{trunc")
    assert main(["cache", "list", "--cache", str(env["cache"])]) == 0
    out = capsys.readouterr().out
    assert (f"damaged: {REPO} {commit[:12]} torch-cpu: its entry.json is not valid JSON; a "
            "load online fetches it again") in out
    assert main(["cache", "list", "--json", "--cache", str(env["cache"])]) == 0
    listed, = json.loads(capsys.readouterr().out)
    assert listed["damaged"] == "its entry.json is not valid JSON"
    with pytest.raises(HubError, match=rf"is damaged: its entry.json is not valid JSON; .*Fix: "
                       f"{_fix(commit)}"):
        loader.load_kernel(REPO, lockfile=root, hub=_hf(tmp_path, env))
    assert loader.get_locked_kernel(REPO, lockfile=root, hub=_hf(tmp_path, env)).VALUE == 1
    assert json.loads(record.read_text())["variant"] == "torch-cpu"  # fetched again


def test_an_entry_json_without_files_is_damaged(tmp_path: Path, env, capsys) -> None:
    _hf_, commit, root, path = _locked_and_downloaded(tmp_path, env)
    record = path.parent / "entry.json"
    record.chmod(0o644)
    record.write_text("[]")
    assert main(["cache", "list", "--cache", str(env["cache"])]) == 0
    assert "torch-cpu: its entry.json records no files" in capsys.readouterr().out


def test_an_entry_of_a_newer_format_is_refused_never_replaced(tmp_path: Path, env,
                                                              capsys) -> None:
    """A newer kernelforge sharing the cache may write entries this version cannot read:
    a load refuses one, naming it and the fixes, rather than taking it for damage and
    fetching it again over the newer version's own; 'cache list' says whose it is, and
    'cache remove' removes it."""
    hf, commit, root, path = _locked_and_downloaded(tmp_path, env)
    record = path.parent / "entry.json"
    record.chmod(0o644)
    text = json.dumps({"format": 2, "blobs": {}})
    record.write_text(text)
    said = (f"{record}: this download cache entry is of format 2, written by a newer "
            "kernelforge sharing the cache \\(this version reads format 1\\); upgrade "
            f"kernelforge .*, or, to have this version fetch it again in its own format, "
            f"{_fix(commit)}")
    for load in (lambda: loader.get_locked_kernel(REPO, lockfile=root, hub=hf),
                 lambda: loader.get_kernel(REPO, version=1, hub=hf, trust_remote_code=True),
                 lambda: download_locked(root, hub=hf)):
        with pytest.raises(HubError, match=said):
            load()
    assert record.read_text() == text
    assert main(["cache", "list", "--cache", str(env["cache"])]) == 0
    assert ("torch-cpu: its entry.json is of format 2, written by a newer kernelforge"
            in capsys.readouterr().out)
    assert main(["cache", "remove", REPO, "--cache", str(env["cache"])]) == 0
    assert loader.get_locked_kernel(REPO, lockfile=root, hub=hf).VALUE == 1
    assert json.loads(record.read_text())["format"] == 1


def test_an_entry_without_a_format_or_with_unknown_fields_is_used(tmp_path: Path,
                                                                  env) -> None:
    """Entries written before ``format`` was recorded, and fields added within format 1,
    are read as they are, not fetched again."""
    hf, commit, root, path = _locked_and_downloaded(tmp_path, env)
    record = path.parent / "entry.json"
    record.chmod(0o644)
    doc = json.loads(record.read_text())
    del doc["format"]
    record.write_text(json.dumps({**doc, "added-later": [1]}))
    before = record.stat().st_mtime_ns
    assert loader.get_locked_kernel(REPO, lockfile=root, hub=hf).VALUE == 1
    assert record.stat().st_mtime_ns == before and "format" not in record.read_text()


@pytest.mark.parametrize("how", ["change", "delete"])
def test_an_offline_load_of_a_changed_cached_file_names_the_fix(
        tmp_path: Path, env, monkeypatch, how: str) -> None:
    _hf_, commit, root, path = _locked_and_downloaded(tmp_path, env)
    if how == "change":
        (path / "helper.py").chmod(0o644)
        (path / "helper.py").write_text("x = 1\n")
    else:
        (path / "helper.py").unlink()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(IntegrityError) as info:
        loader.load_kernel(REPO, lockfile=root, hub=_hf(tmp_path, env))
    said = str(info.value)
    assert ("changed: helper.py" if how == "change" else "missing: helper.py") in said
    assert f"fix: {_fix(commit)}" in said
    with pytest.raises(IntegrityError, match=f"fix: {_fix(commit)}"):
        download_locked(root, hub=_hf(tmp_path, env))


def test_an_offline_load_of_a_lock_the_cache_matches_but_the_lock_does_not_names_no_fix(
        tmp_path: Path, env, monkeypatch) -> None:
    """The cached copy is as fetched: removing it would not help, so no fix is said."""
    _hf_, commit, root, path = _locked_and_downloaded(tmp_path, env)
    doc = json.loads((root / "kernelforge.lock").read_text())
    doc["kernels"][REPO]["variants"]["torch-cpu"]["files"]["helper.py"] = "A" * 43 + "="
    (root / "kernelforge.lock").write_text(json.dumps(doc))
    with pytest.raises(IntegrityError) as info:
        loader.load_kernel(REPO, lockfile=root, hub=_hf(tmp_path, env))
    assert "helper.py" in str(info.value) and "cache remove" not in str(info.value)


def test_a_damaged_cached_copy_fetched_again_is_still_checked_against_the_lock(
        tmp_path: Path, env, caplog) -> None:
    """The cached copy fails verification and is fetched again; the hub now serves other
    bytes for the pinned commit, which a build without a digest block cannot catch: the
    lock's pins still apply to the second attempt."""
    hf = _hf(tmp_path, env)
    make_variant(tmp_path / "b", "torch-cpu", module_id=uid("p"), with_digest=False)
    commit = hf.publish(REPO, tmp_path / "b", version=1).commit
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    lock_project(root, hub=hf, allow=True)
    (_, _, path), = download_locked(root, hub=hf)
    (path / "helper.py").chmod(0o644)
    (path / "helper.py").write_text("x = 1\n")  # the cached copy is damaged
    hf._api.tamper(REPO, commit, "build/torch-cpu/helper.py",
                   b"def double(x):\n    return 3 * x\n")
    with caplog.at_level(logging.WARNING), pytest.raises(IntegrityError) as info:
        loader.get_locked_kernel(REPO, lockfile=root, hub=_hf(tmp_path, env))
    said = str(info.value)
    assert said.startswith(f"refusing to load {REPO} (variant torch-cpu) at commit "
                           f"{commit[:12]} from the Hugging Face Hub: the files it serves "
                           f"differ from those {root / 'kernelforge.lock'} pins:\n"
                           "  changed: helper.py\n")
    assert "run 'kernelforge lock' again" in said
    assert any("failed verification" in r.getMessage() and "fetching it again"
               in r.getMessage() for r in caplog.records)
    assert (path / "helper.py").read_bytes() == b"def double(x):\n    return 3 * x\n"
    (path / "helper.py").write_text("x = 1\n")  # damaged again: so says a download
    with pytest.raises(IntegrityError, match=rf"^refusing to download {REPO} \(variant "
                       rf"torch-cpu\) .* differ from those {root / 'kernelforge.lock'} "
                       "pins:\n  changed: helper.py\n"):
        download_locked(root, hub=_hf(tmp_path, env))


# --- lock files: advice and validation -----------------------------------------------------


def test_the_not_locked_advice_of_a_kernels_lock_names_its_table(tmp_path: Path, env) -> None:
    hub = LocalHub(env["hub"])
    for repo in (REPO, OTHER):
        make_variant(tmp_path / repo, "torch-cpu", module_id=uid("a"))
        hub.publish(repo, tmp_path / repo, version=1)
    root = project(tmp_path, f'[tool.kernels.dependencies]\n"{REPO}" = 1\n')
    lock_project(root)
    with pytest.raises(LockError, match=r"is not locked .*add it to the project's "
                       r"\[tool.kernels.dependencies\] and run 'kernelforge lock'"):
        loader.get_locked_kernel(OTHER, lockfile=root / "kernels.lock")
    (root / "pyproject.toml").write_text(f'[tool.kernels.dependencies]\n"{REPO}" = 1\n'
                                         f'"{OTHER}" = 1\n')
    lock_project(root)  # the advice followed
    assert loader.get_locked_kernel(OTHER, lockfile=root / "kernels.lock").VALUE == 1
    with pytest.raises(LockError, match=r"add it to the project's "
                       r"\[tool.kernelforge.dependencies\]"):
        loader.get_locked_kernel("kernels-test/none", lockfile=root / "kernelforge.lock")


@pytest.mark.parametrize("name", ["../x", "a/b", "/abs", "", ".", "..", "a\\b"])
def test_a_lock_with_an_unsafe_variant_name_is_refused_when_read(
        tmp_path: Path, env, monkeypatch, capsys, name: str) -> None:
    _hf_, commit, root, _path = _locked_and_downloaded(tmp_path, env)
    doc = json.loads((root / "kernelforge.lock").read_text())
    variants = doc["kernels"][REPO]["variants"]
    variants[name] = variants["torch-cpu"]
    (root / "kernelforge.lock").write_text(json.dumps(doc))
    lock = root / "kernelforge.lock"
    with pytest.raises(LockError) as info:
        read_lock(root)
    assert str(info.value) == (
        f"{lock}: kernel '{REPO}': variant {name!r} is not a variant name (one folder "
        "name, not empty, '.' or '..', without '/' or '\\'); run 'kernelforge lock' again "
        "to rewrite the file")
    _use_hf(monkeypatch, tmp_path, env)
    assert main(["download", str(root), "--hub", "hf", "--all-variants"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {lock}: kernel '{REPO}': variant ") and "Traceback" not in err


def test_a_kernels_lock_commit_in_upper_case_is_read_in_lower_case(tmp_path: Path) -> None:
    lock = tmp_path / "kernels.lock"
    lock.write_text(json.dumps([{"dependency": {"repo-id": "a/b", "version": 1},
                                 "lock": {"commit": "A" * 40}}]))
    assert read_lock(lock).require("a/b").commit == "a" * 40


@pytest.mark.parametrize("revision", ['""', '"  "'])
def test_an_empty_revision_is_said_to_be_empty(tmp_path: Path, revision: str) -> None:
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"a/b" = {{ revision = '
                              f'{revision} }}\n')
    with pytest.raises(LockError, match=r"revision '\s*' must not be empty; expected"):
        read_requirements(root)


# --- 'kernelforge download' ------------------------------------------------------------------


def test_download_with_a_malformed_local_kernels_is_an_error_line(
        tmp_path: Path, env, monkeypatch, capsys) -> None:
    hub = LocalHub(env["hub"])
    make_variant(tmp_path / "o", "torch-cpu", module_id=uid("o"))
    hub.publish(OTHER, tmp_path / "o", version=1)
    vdir = make_variant(tmp_path / "r", "torch-cpu", module_id=uid("r"))
    meta = json.loads((vdir / "metadata.json").read_text())
    meta["kernel-depends"] = [{"repo-id": OTHER, "version": 1}]
    (vdir / "metadata.json").write_text(json.dumps(meta))
    commit = hub.publish(REPO, tmp_path / "r", version=1).commit
    lock = tmp_path / "kernels.lock"  # pins the kernel, not its dependency
    lock.write_text(json.dumps([{"dependency": {"repo-id": REPO, "version": 1},
                                 "lock": {"commit": commit}}]))
    monkeypatch.setenv("LOCAL_KERNELS", "garbage")
    assert main(["download", str(lock)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: LOCAL_KERNELS: malformed entry 'garbage'")
    assert err.rstrip().endswith("fix: correct LOCAL_KERNELS or unset it")
    assert err.count("\n") == 1


@pytest.mark.parametrize("text", ['{"format": "kernelforge-lock/1", "kernels": {}}', "[]"])
def test_download_of_a_lock_with_no_kernels_says_so(tmp_path: Path, capsys, text: str) -> None:
    name = "kernels.lock" if text == "[]" else "kernelforge.lock"
    (tmp_path / name).write_text(text)
    assert main(["download", str(tmp_path)]) == 0
    assert capsys.readouterr() == (
        f"nothing is locked in {tmp_path / name}; nothing to download\n", "")


@pytest.mark.parametrize("all_variants", [False, True])
def test_download_failing_partway_says_what_it_fetched(tmp_path: Path, env, capsys,
                                                       all_variants: bool) -> None:
    """One variant of three kernels fails its check: the error says which variants were
    fetched before it and which were not, not only the error."""
    hub = LocalHub(env["hub"])
    for name in ("a", "b", "c"):
        make_variant(tmp_path / name, "torch-cpu", module_id=uid(name))
        make_variant(tmp_path / name, "torch-cuda", module_id=uid(name))
        hub.publish(f"kernels-test/{name}", tmp_path / name, version=1)
    root = project(tmp_path, "[tool.kernelforge.dependencies]\n" + "".join(
        f'"kernels-test/{name}" = 1\n' for name in ("a", "b", "c")))
    lock_project(root, allow=True)
    bad = "torch-cuda" if all_variants else "torch-cpu"
    damaged = next(p for p in (env["hub"] / "kernels-test" / "b").rglob("helper.py")
                   if p.parent.name == bad)
    damaged.chmod(0o644)
    damaged.write_text("changed\n")
    assert main(["download", str(root), *(["--all-variants"] if all_variants else [])]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"error: refusing to load {damaged.parent}: ")
    assert err.endswith(
        "already fetched and verified: kernels-test/a (torch-cpu, torch-cuda), "
        "kernels-test/b (torch-cpu); not fetched: kernels-test/b (torch-cuda), "
        "kernels-test/c\n" if all_variants else
        "already fetched and verified: kernels-test/a (torch-cpu); not fetched: "
        "kernels-test/b (torch-cpu), kernels-test/c\n"), err


def test_download_all_variants_checks_the_backend(tmp_path: Path, env, capsys,
                                                  monkeypatch) -> None:
    _hf_, _commit, root, _path = _locked_and_downloaded(tmp_path, env)
    _use_hf(monkeypatch, tmp_path, env)
    # a backend torch here does not support (an unknown name is a usage error)
    assert main(["download", str(root), "--hub", "hf", "--backend", "rocm"]) == 1
    plain = capsys.readouterr().err
    assert "backend 'rocm' cannot be used here" in plain
    assert "'kernelforge download --all-variants' of a project's lock file fetches" in plain
    assert main(["download", str(root), "--hub", "hf", "--all-variants",
                 "--backend", "rocm"]) == 1
    # refused the same way, but not told to pass the --all-variants it was given
    assert capsys.readouterr().err == (
        "error: backend 'rocm' cannot be used here: torch in this process supports cpu "
        "(with --all-variants, the download fetches every variant the lock pins, rocm's "
        "too: leave --backend out)\n")


@pytest.mark.parametrize("below", [False, True])
def test_download_into_a_cache_path_that_is_a_file(tmp_path: Path, env, capsys,
                                                   monkeypatch, below: bool) -> None:
    _hf_, _commit, root, _path = _locked_and_downloaded(tmp_path, env)
    afile = tmp_path / "afile"
    afile.write_text("x")
    cache = afile / "cache" if below else afile
    monkeypatch.setattr("kernelforge.hub.as_hub",
                        lambda hub: HfHub(api=FakeHfApi(tmp_path / "remote"), cache=cache))
    assert main(["download", str(root), "--hub", "hf"]) == 1
    assert capsys.readouterr().err == (
        f"error: {cache} is a file (or lies below one), not a download cache directory; "
        "fix: set KERNELFORGE_CACHE to a directory, or move the file away\n")
    assert afile.read_text() == "x"


def test_a_lock_file_in_a_directory_that_cannot_be_written_says_so(
        tmp_path: Path, env, monkeypatch) -> None:
    """The temporary the lock file is replaced by is refused: the directory is named."""
    from kernelforge import _durable

    hub = LocalHub(env["hub"])
    make_variant(tmp_path / "b", "torch-cpu", module_id=uid("ro"))
    hub.publish(REPO, tmp_path / "b", version=1)
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    lock_project(root)
    before = (root / "kernelforge.lock").read_bytes()

    def refused(path: Path, data: bytes, **_kw: object) -> Path:
        tmp = path.with_name(f".{path.name}.000000000000.tmp")
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(tmp))

    monkeypatch.setattr(_durable, "write_temp", refused)
    with pytest.raises(LockError) as info:
        lock_project(root)
    lock = root / "kernelforge.lock"
    assert str(info.value) == (
        f"{lock}: cannot write the lock file: its directory {root} is not writable "
        "(Permission denied), and the file is replaced by a new one written there; fix: "
        "make the directory writable; nothing was changed")
    assert lock.read_bytes() == before


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root writes any directory")
def test_a_lock_file_in_a_read_only_directory_says_so(tmp_path: Path, env) -> None:
    hub = LocalHub(env["hub"])
    make_variant(tmp_path / "b", "torch-cpu", module_id=uid("rd"))
    hub.publish(REPO, tmp_path / "b", version=1)
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    lock_project(root)
    root.chmod(0o555)
    try:
        with pytest.raises(LockError, match=f"its directory {root} is not writable"):
            lock_project(root)
    finally:
        root.chmod(0o755)


# --- the download cache ------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs chown")
def test_a_refs_file_another_user_wrote_is_refused(tmp_path: Path, env, monkeypatch) -> None:
    make_variant(tmp_path / "b1", "torch-cpu", module_id=uid("a"), value=1)
    a = _hf(tmp_path, env).publish(REPO, tmp_path / "b1", version=1).commit
    assert loader.get_kernel(REPO, version=1, hub=_hf(tmp_path, env),
                             trust_remote_code=True).VALUE == 1
    make_variant(tmp_path / "b2", "torch-cpu", module_id=uid("b"), value=2)
    _hf(tmp_path, env).publish(REPO, tmp_path / "b2", version=1)
    assert loader.get_kernel(REPO, version=1, hub=_hf(tmp_path, env),
                             trust_remote_code=True).VALUE == 2
    refs = env["cache"] / "refs" / "kernels-test" / "relu.json"
    doc = json.loads(refs.read_text())
    doc["branches"]["v1"] = a
    refs.write_text(json.dumps(doc))
    os.lchown(refs, 54321, 54321)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError, match=f"{refs}: this download cache file belongs to another "
                       "user"):
        loader.get_kernel(REPO, version=1, hub=_hf(tmp_path, env), trust_remote_code=True)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs chown")
def test_a_listing_another_user_wrote_is_refused(tmp_path: Path, env) -> None:
    hf = _hf(tmp_path, env)
    make_variant(tmp_path / "b", "torch-cpu", module_id=uid("l"))
    commit = hf.publish(REPO, tmp_path / "b", version=1).commit
    assert hf.variants(REPO, commit) == ["torch-cpu"]  # listed, and the listing cached
    listing = env["cache"] / "listings" / "kernels-test" / "relu" / f"{commit}.json"
    os.lchown(listing, 54321, 54321)
    with pytest.raises(HubError, match=f"{listing}: this download cache file belongs to "
                       "another user"):
        _hf(tmp_path, env).variants(REPO, commit)


def test_cache_clear_keeps_the_lock_files_as_documented(tmp_path: Path, env) -> None:
    """Deleting a lock file another process may be about to take would let two writers
    run at once, so ``locks/`` keeps them; the README and the module say so."""
    import kernelforge.cache

    _locked_and_downloaded(tmp_path, env)
    assert main(["cache", "clear", "--cache", str(env["cache"])]) == 0
    assert list((env["cache"] / "locks").iterdir())
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    assert "`locks/`" in readme and "`cache clear` leaves them" in readme
    assert "kernelforge cache clear`` leaves them" in (kernelforge.cache.__doc__ or "")
