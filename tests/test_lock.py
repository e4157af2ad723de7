"""Lock files (kernelforge.lock): requirements, the round trip lock -> download -> offline
load, refusing anything the lock does not pin, and Hugging Face's kernels.lock."""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import re
from pathlib import Path

import pytest
from kf_sharing import SO_NAME, FakeHfApi, isolate, make_variant, uid
from kf_testutil import write_metadata

from kernelforge import loader, signing, trust
from kernelforge.cli import main
from kernelforge.errors import (
    HubError,
    IntegrityError,
    LockError,
    SignatureMismatchError,
    TrustError,
    VariantNotFoundError,
)
from kernelforge.hub import LocalHub
from kernelforge.hub.hf import HfHub
from kernelforge.lock import (
    DownloadProgress,
    download_locked,
    lock_project,
    read_lock,
    read_requirements,
)
from kernelforge.lock import _download as download_module
from kernelforge.lock import _pin as pin_module

pytestmark = pytest.mark.usefixtures("cpu_system")

REPO = "kernels-test/relu"
OTHER = "kernels-test/other"


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path: Path) -> dict[str, Path]:
    return isolate(monkeypatch, tmp_path)


@pytest.fixture
def api(tmp_path: Path) -> FakeHfApi:
    return FakeHfApi(tmp_path / "remote")


@pytest.fixture
def hf(api: FakeHfApi, env) -> HfHub:
    return HfHub(api=api, cache=env["cache"])


@pytest.fixture
def key(tmp_path: Path) -> signing.SigningKey:
    k = signing.generate_key(tmp_path / "k.pem")
    trust.add_key(k.public.text, name="ci", repos=("kernels-test/*",))
    return k


def project(tmp_path: Path, text: str) -> Path:
    root = tmp_path / "project"
    root.mkdir(exist_ok=True)
    (root / "pyproject.toml").write_text(text)
    return root


def publish(hub, repo: str, root: Path, version: int = 1, key=None, **kw) -> tuple[str, str]:
    module_id = kw.pop("module_id", uid("lock"))
    make_variant(root, "torch-cpu", version=version, module_id=module_id, **kw)
    make_variant(root, "torch-cuda", version=version, module_id=module_id + "_cuda")
    return hub.publish(repo, root, version=version, signer=key).commit, module_id


# --- requirements -------------------------------------------------------------------------


def test_requirements_from_both_tables(tmp_path: Path) -> None:
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n'
                   f'"a/b" = ">=2"\n"c/d" = {{ revision = "v1.2" }}\n'
                   f'[tool.kernels.dependencies]\n"{REPO}" = 1\n"e/f" = "3"\n')
    reqs = {r.repo_id: r.to_json() for r in read_requirements(root)}
    assert reqs == {REPO: {"version": 1}, "a/b": {"version": ">=2"},
                    "c/d": {"revision": "v1.2"}, "e/f": {"version": 3}}



def test_a_requirement_hugging_faces_lock_cannot_read_is_warned_about(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Their `kernels lock` takes each value of [tool.kernels.dependencies] as a version
    number; ">=1", "3" or a table make it fail, while [tool.kernelforge.dependencies] is
    ours alone."""
    root = project(tmp_path, '[tool.kernelforge.dependencies]\n"a/b" = ">=2"\n'
                   '[tool.kernels.dependencies]\n"c/d" = 1\n"e/f" = "3"\n'
                   '"g/h" = { revision = "v1" }\n')
    with caplog.at_level(logging.WARNING, logger="kernelforge"):
        read_requirements(root)
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2, warned
    assert all("[tool.kernels.dependencies]" in w and "is not a plain version number" in w
               and "list it under [tool.kernelforge.dependencies]" in w for w in warned)
    assert ["'e/f'" in warned[0], "'g/h'" in warned[1]] == [True, True]

@pytest.mark.parametrize(("text", "problem"), [
    ("", r"no kernel dependencies; add a \[tool.kernelforge.dependencies\] table"),
    # a table that is there but empty is not missing: say so, not "add a table" (nor
    # that it is a misspelling of itself)
    ("[tool.kernelforge.dependencies]\n",
     r"\[tool.kernelforge.dependencies\] lists no kernel; add one to it, e.g. "
     r"\"kernels-community/relu\" = 1$"),
    ("[tool.kernels.dependencies]\n",
     r"\[tool.kernels.dependencies\] lists no kernel; add one to it, e.g. "
     r"\"kernels-community/relu\" = 1$"),
    ("[tool.kernelforge.dependencies]\n[tool.kernels.dependencies]\n",
     r"\[tool.kernelforge.dependencies\] and \[tool.kernels.dependencies\] list no kernel; "
     r"add one to either"),
    ('[tool.kernelforge.dependencies]\n"x/y" = "latest"\n', "'latest' is not a version"),
    ('[tool.kernelforge.dependencies]\n"x/y" = { version = 1, revision = "v1" }\n',
     "exactly one of 'version' or 'revision'"),
    ('[tool.kernelforge.dependencies]\n"not a repo" = 1\n', "not a valid repository id"),
    # a key that is no repository id: nothing said about values, which are fine
    ('[tool.kernelforge.dependencies]\n"my-relu" = 1\n',
     r"key tool.kernelforge.dependencies.'my-relu': .*not a valid repository id.*; the keys of "
     r"\[tool.kernelforge.dependencies\] are repository ids, e.g. \"kernels-community/relu\" "
     r"= 1$"),
    ('[tool.kernelforge.dependencies]\n"x/y" = 1\n[tool.kernels.dependencies]\n"x/y" = 2\n',
     "keep one"),
    ("not toml [", "cannot be read as TOML"),
    # a misspelt table holds the kernels: named, with the spelling that is read
    ('[tool.kernelforge.dependecies]\n"x/y" = 1\n',
     r"no kernel dependencies; .*; \[tool.kernelforge.dependecies\] is read by neither "
     r"tool: did you mean \[tool.kernelforge.dependencies\]\?$"),
    ('[tool.kernels.dependencies]\n[tool.kernel.dependencies]\n"x/y" = 1\n[tool.black]\n',
     r"\[tool.kernels.dependencies\] lists no kernel; .*; \[tool.kernel.dependencies\] is "
     r"read by neither tool: did you mean \[tool.kernels.dependencies\]\?$"),
    # the names of such tables are shown on the error's one line, escapes written out
    ('[tool.kernelforge."dependencies\\n"]\n"x/y" = 1\n',
     r"; \[tool.kernelforge.dependencies\\n\] is read by neither tool: did you mean "
     r"\[tool.kernelforge.dependencies\]\?$"),
    ('[tool."kernel\\u001b[2J".dependencies]\n"x/y" = 1\n',
     r"; \[tool.kernel\\x1b\[2J.dependencies\] is read by neither tool: did you mean "
     r"\[tool.kernels.dependencies\]\?$"),
])
def test_bad_requirements_name_the_key(tmp_path: Path, text: str, problem: str) -> None:
    with pytest.raises(LockError, match=problem):
        read_requirements(project(tmp_path, text))


def test_missing_pyproject(tmp_path: Path) -> None:
    with pytest.raises(LockError, match="pyproject.toml: not found"):
        read_requirements(tmp_path)


# --- the round trip -----------------------------------------------------------------------


def test_lock_download_offline_load(hf: HfHub, api: FakeHfApi, tmp_path: Path, key,
                                    monkeypatch, env) -> None:
    commit, module_id = publish(hf, REPO, tmp_path / "v1", key=key)
    root = project(tmp_path, f'[tool.kernels.dependencies]\n"{REPO}" = ">=1"\n')
    result = lock_project(root, hub=hf)
    assert result.path == root / "kernelforge.lock" and result.hf_path == root / "kernels.lock"
    doc = json.loads(result.path.read_text())
    entry = doc["kernels"][REPO]
    assert (entry["commit"], entry["hub"], entry["branch"]) == (commit, "hf", "v1")
    assert entry["requested"] == {"version": ">=1"}
    cpu = entry["variants"]["torch-cpu"]
    assert set(cpu["files"]) == {"__init__.py", "helper.py", SO_NAME, "metadata.json"}
    assert cpu["signer"] == key.public.key_id
    assert set(entry["variants"]) == {"torch-cpu", "torch-cuda"}
    # Hugging Face's reader accepts the kernels.lock written beside it
    kernels_rust = pytest.importorskip("kernels._rust")
    hf_locks = kernels_rust.KernelLocks.from_json(result.hf_path.read_text())
    assert [lk.commit for lk in hf_locks.values()] == [commit]

    # a newer publish on the same branch does not move what the lock loads
    publish(hf, REPO, tmp_path / "v1b", key=key, value=2)

    fetched = download_locked(root, hub=hf)
    assert [(r, v) for r, v, _ in fetched] == [(REPO, "torch-cpu")]
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    module = loader.load_kernel(REPO, lockfile=root / "kernelforge.lock", hub=hf)
    assert (module.__name__, module.VALUE) == (module_id, 1)
    assert loader.get_locked_kernel(REPO, lockfile=result.path, hub=hf) is module
    info = loader.kernel_info(REPO, lockfile=result.path, hub=hf)
    assert info.source == "lock" and info.commit == commit
    assert info.trust.startswith("trust: allowed, signed by trusted key")


def test_download_all_variants_then_a_changed_variant_is_refused(
    hf: HfHub, api: FakeHfApi, tmp_path: Path, key
) -> None:
    commit, _module_id = publish(hf, REPO, tmp_path / "v1", key=key)
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    lock = lock_project(root, hub=hf).path
    assert lock_project(root, hub=hf).hf_path is None  # no [tool.kernels] table: ours only
    got = download_locked(lock, hub=hf, all_variants=True)
    assert sorted(v for _, v, _ in got) == ["torch-cpu", "torch-cuda"]
    # the remote changes the locked variant in place (a compromised hub); cold cache
    api.tamper(REPO, commit, "build/torch-cpu/helper.py", b"def double(x):\n    return x\n")
    cold = HfHub(api=api, cache=tmp_path / "cold")
    with pytest.raises(IntegrityError, match="changed: helper.py"):
        loader.get_locked_kernel(REPO, lockfile=lock, hub=cold)
    # a lock edited to pin other bytes refuses the genuine files too
    doc = json.loads(lock.read_text())
    doc["kernels"][REPO]["variants"]["torch-cpu"]["files"]["__init__.py"] = "AAAA"
    lock.write_text(json.dumps(doc))
    with pytest.raises(IntegrityError, match="changed: __init__.py"):
        loader.get_locked_kernel(REPO, lockfile=lock, hub=hf)
    with pytest.raises(IntegrityError, match="changed: __init__.py"):
        download_locked(lock, hub=hf)


def test_locking_enforces_trust_and_locked_files_load_unsigned(
    hf: HfHub, tmp_path: Path
) -> None:
    _commit, module_id = publish(hf, REPO, tmp_path / "v1")
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    with pytest.raises(TrustError, match="no signature"):
        lock_project(root, hub=hf)
    assert not (root / "kernelforge.lock").exists()
    lock = lock_project(root, hub=hf, allow=[REPO]).path
    # the lock pins every byte, so loading what it pins needs no further allowance
    assert loader.get_locked_kernel(REPO, lockfile=lock, hub=hf).__name__ == module_id


def test_hf_kernels_lock_pins_the_commit_only(hf: HfHub, tmp_path: Path) -> None:
    commit, module_id = publish(hf, REPO, tmp_path / "v1")
    publish(hf, REPO, tmp_path / "v1b", value=2)
    lock = tmp_path / "kernels.lock"
    lock.write_text(json.dumps([{"dependency": {"repo-id": REPO, "version": 1},
                                 "lock": {"commit": commit}}]))
    parsed = read_lock(lock)
    assert parsed.kind == "kernels" and parsed.require(REPO).variants is None
    assert parsed.require(REPO.upper()) is parsed.require(REPO)  # ids ignore case
    twice = tmp_path / "twice.lock"
    twice.write_text(json.dumps([{"dependency": {"repo-id": r, "version": 1},
                                  "lock": {"commit": commit}} for r in (REPO, REPO.upper())]))
    with pytest.raises(LockError, match="locked under 2 spellings"):
        read_lock(twice).require(REPO.title())
    with pytest.raises(TrustError):  # no digests pinned: the usual trust policy applies
        loader.get_locked_kernel(REPO, lockfile=lock, hub=hf)
    module = loader.get_locked_kernel(REPO, lockfile=lock, hub=hf, trust_remote_code=True)
    assert (module.__name__, module.VALUE) == (module_id, 1)


def _download_kernels_lock(hf: HfHub, tmp_path: Path, commit: str, caplog) -> Path:
    """Write a Hugging Face ``kernels.lock`` pinning ``commit`` of REPO version 1 and
    download it, its WARNING lines in ``caplog``; the variant is fetched all the same."""
    lock = tmp_path / "kernels.lock"
    lock.write_text(json.dumps([{"dependency": {"repo-id": REPO, "version": 1},
                                 "lock": {"commit": commit}}]))
    with caplog.at_level(logging.WARNING, logger="kernelforge.lock"):
        fetched = download_locked(lock, hub=hf)
    assert [(r, v) for r, v, _ in fetched] == [(REPO, "torch-cpu")]
    return lock


def test_kernels_lock_download_warns_and_load_kernel_takes_trust_remote_code(
    hf: HfHub, tmp_path: Path, caplog
) -> None:
    commit, module_id = publish(hf, REPO, tmp_path / "v1", value=3)
    lock = _download_kernels_lock(hf, tmp_path, commit, caplog)
    assert "kernels.lock pins only its commit, and a load will refuse it" in caplog.text
    assert f"kernelforge trust allow {REPO}" in caplog.text
    assert "have its publisher sign it" in caplog.text  # it is unsigned
    assert f"trust_remote_code=[{REPO!r}] to load_kernel" in caplog.text
    with pytest.raises(TrustError, match="trust_remote_code="):
        loader.load_kernel(REPO, lockfile=lock, hub=hf)
    module = loader.load_kernel(REPO, lockfile=lock, hub=hf, trust_remote_code=[REPO])
    assert (module.__name__, module.VALUE) == (module_id, 3)
    # once the repository is allowed, download has nothing to warn about
    trust.allow_repo(REPO)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kernelforge.lock"):
        download_locked(lock, hub=hf)
    assert "pins only its commit" not in caplog.text


def test_kernels_lock_download_of_a_signed_build_without_digests_says_the_fix_that_works(
    hf: HfHub, tmp_path: Path, key, caplog
) -> None:
    """A trusted key's signature over a metadata.json that records no file digests covers
    none of the code, so a load of a kernels.lock, which pins no files, refuses the build
    whatever is trusted or allowed: the download's warning says the fix the load's refusal
    names (a rebuild, or a kernelforge.lock that pins it by choice), not a key to trust or
    a repository to allow, which would not help."""
    commit, _module_id = publish(hf, REPO, tmp_path / "v1", value=4, with_digest=False)
    meta = hf._api.tree(REPO, commit) / "build" / "torch-cpu" / "metadata.json"
    hf._api.tamper(REPO, commit, "build/torch-cpu.sig",  # signed some other way
                   key.sign_variant("torch-cpu", meta.read_bytes(), repo_id=REPO))
    lock = _download_kernels_lock(hf, tmp_path, commit, caplog)
    assert ("kernels.lock pins only its commit, and a load will refuse it: its signed "
            "metadata.json records no file digests, so the signature does not cover the "
            "code. To load it: ask the publisher to rebuild with kernelforge, which writes "
            f"digests, and republish; or pin it with a kernelforge.lock: kernelforge lock "
            f"--allow {REPO}") in caplog.text
    assert "trust add" not in caplog.text and "trust allow" not in caplog.text
    assert "trust_remote_code" not in caplog.text
    trust.allow_repo(REPO)
    with pytest.raises(TrustError, match="records no file digests") as info:
        loader.load_kernel(REPO, lockfile=lock, hub=hf, trust_remote_code=[REPO])
    assert f"kernelforge lock --allow {REPO}" in str(info.value)


def test_lock_errors(hf: HfHub, tmp_path: Path) -> None:
    publish(hf, REPO, tmp_path / "v1")
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    lock = lock_project(root, hub=hf, allow=True).path
    with pytest.raises(LockError, match=f"{OTHER} is not locked"):
        loader.get_locked_kernel(OTHER, lockfile=lock, hub=hf)
    with pytest.raises(LockError, match=r"get_locked_kernel\(lockfile=None\) reads the lock "
                                        "file from the installed metadata of the calling "
                                        "package, but the calling module .* belongs to no"):
        loader.get_locked_kernel(REPO, lockfile=None, hub=hf)
    with pytest.raises(LockError, match="lock file not found"):
        read_lock(tmp_path / "nope.lock")
    bad = tmp_path / "bad.lock"
    bad.write_text('{"format": "kernelforge-lock/1", "kernels": {"a/b": {"commit": "x"}}}')
    with pytest.raises(LockError, match="'commit' must be a 40-hex"):
        read_lock(bad)
    with pytest.raises(HubError, match="not in the download cache"):  # never downloads
        loader.load_kernel(REPO, lockfile=lock, hub=HfHub(api=hf._api, cache=tmp_path / "c2"))
    with pytest.raises(HubError, match="no version >= 5"):
        lock_project(project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = ">=5"\n'),
                     hub=hf, allow=True)


def test_local_hub_lock(tmp_path: Path, env) -> None:
    hub = LocalHub(env["hub"])
    commit, module_id = publish(hub, REPO, tmp_path / "v1")
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    lock = lock_project(root).path  # the default hub finds the repository locally
    entry = read_lock(lock).require(REPO)
    assert (entry.hub, entry.commit) == ("local", commit)
    assert loader.get_locked_kernel(REPO, lockfile=lock).__name__ == module_id


def test_a_kernels_lock_the_project_no_longer_writes_is_said_to_be_stale(
        tmp_path: Path, env, caplog: pytest.LogCaptureFixture) -> None:
    """A project that moves its kernels out of [tool.kernels.dependencies] gets no new
    kernels.lock: the old one, which still pins the old commits, is named as left behind."""
    hub = LocalHub(env["hub"])
    old, _ = publish(hub, REPO, tmp_path / "v1")
    new, _ = publish(hub, REPO, tmp_path / "v2", version=2)
    root = project(tmp_path, f'[tool.kernels.dependencies]\n"{REPO}" = 1\n')
    hf_lock = lock_project(root).hf_path
    assert hf_lock is not None
    with caplog.at_level(logging.WARNING, logger="kernelforge.lock"):
        lock_project(root)  # still written: nothing said
    assert "left as it was" not in caplog.text
    project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = ">=1"\n')
    with caplog.at_level(logging.WARNING, logger="kernelforge.lock"):
        result = lock_project(root)
    assert result.hf_path is None and result.kernels[0].commit == new
    assert read_lock(hf_lock).require(REPO).commit == old
    assert (f"{hf_lock}: left as it was, pinning {REPO}: it is written for the kernels of "
            "[tool.kernels.dependencies], and the project lists none there now") in caplog.text
    assert "delete it, or list the kernels in [tool.kernels.dependencies] again" in caplog.text


@pytest.mark.parametrize("source_versions", [(), (3,)])
def test_at_least_requirement_follows_a_redirect(tmp_path: Path, env,
                                                 source_versions: tuple[int, ...]) -> None:
    """">=N" picks among the versions of the repository the redirect leads to, as "= N"
    does, whether the redirected repository has builds of its own or none."""
    hub = LocalHub(env["hub"])
    commit, _ = publish(hub, OTHER, tmp_path / "new")
    for v in source_versions:
        publish(hub, REPO, tmp_path / f"old{v}", version=v)
    hub.set_status(REPO, f'kind = "redirect"\ndestination = "{OTHER}"\n')
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = ">=1"\n')
    entry = read_lock(lock_project(root, hub=hub).path).require(REPO)
    assert (entry.repo, entry.branch, entry.commit) == (OTHER, "v1", commit)
    with pytest.raises(HubError, match=f"{OTHER} \\(redirected from {REPO}\\): no version >= 2"):
        lock_project(project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = ">=2"\n'),
                     hub=hub)


def test_cli_lock_download_info(hf: HfHub, tmp_path: Path, key, monkeypatch, capsys) -> None:
    commit, _ = publish(hf, REPO, tmp_path / "v1", key=key)
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    monkeypatch.setattr("kernelforge.hub.as_hub", lambda hub: hf)
    assert main(["lock", str(root), "--hub", "hf"]) == 0
    out = capsys.readouterr().out
    assert f"{REPO}: branch v1, commit {commit[:12]} (hf), 2 variants" in out
    assert main(["download", str(root), "--hub", "hf"]) == 0
    assert f"{REPO} torch-cpu: verified" in capsys.readouterr().out
    assert main(["info", REPO, "--lock", str(root / "kernelforge.lock"), "--hub", "hf"]) == 0
    assert f"pinned by {root / 'kernelforge.lock'}" in capsys.readouterr().out
    assert main(["lock", str(tmp_path / "nowhere")]) == 1
    assert "pyproject.toml: not found" in capsys.readouterr().err


def test_download_all_variants_is_enough_for_an_offline_load(
    hf: HfHub, api: FakeHfApi, tmp_path: Path, key, monkeypatch
) -> None:
    """The files an offline load reads besides the variant (its metadata.json, signature
    and sigstore bundle, or that they are absent) are cached by the download too."""
    _commit, module_id = publish(hf, REPO, tmp_path / "v1", key=key)
    lock = lock_project(project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n'),
                        hub=hf).path
    cold = HfHub(api=api, cache=tmp_path / "cold")  # nothing from the lock step in it
    got = download_locked(lock, hub=cold, all_variants=True)
    assert sorted(v for _, v, _ in got) == ["torch-cpu", "torch-cuda"]
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = HfHub(api=api, cache=tmp_path / "cold")
    assert loader.load_kernel(REPO, lockfile=lock, hub=offline).__name__ == module_id


@pytest.mark.parametrize("order", [[1, 2], [2, 1]])
def test_a_kernels_lock_listing_a_repository_twice_loads_the_first_in_their_order(
        tmp_path: Path, order: list[int]) -> None:
    """Hugging Face's reader keeps a kernels.lock as a map sorted by request (versions
    ascending), and a load by name takes its repository's first entry there, whatever
    the order in the file: so does ours."""
    lock = tmp_path / "kernels.lock"
    lock.write_text(json.dumps([
        {"dependency": {"repo-id": REPO, "version": v}, "lock": {"commit": str(v) * 40}}
        for v in order]))
    assert read_lock(lock).require(REPO).commit == "1" * 40
    kernels_locking = pytest.importorskip("kernels.locking")
    locks, dep = kernels_locking.get_locked_kernel_revision(REPO, lock)
    assert locks[dep].commit == "1" * 40


def test_a_kernels_lock_listing_a_request_twice_is_refused(tmp_path: Path) -> None:
    lock = tmp_path / "kernels.lock"
    entry = {"dependency": {"repo-id": REPO, "version": 1}, "lock": {"commit": "1" * 40}}
    lock.write_text(json.dumps([entry, {**entry, "lock": {"commit": "2" * 40}}]))
    with pytest.raises(LockError, match=f"{REPO} version 1 is listed twice"):
        read_lock(lock)


def test_a_project_without_a_lock_file_names_both(tmp_path: Path) -> None:
    with pytest.raises(LockError, match="neither kernelforge.lock nor kernels.lock found"):
        read_lock(tmp_path)


def test_a_lock_from_another_local_hub_says_how_to_name_it(
    tmp_path: Path, monkeypatch
) -> None:
    team = LocalHub(tmp_path / "team")
    publish(team, REPO, tmp_path / "v1")
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    lock = lock_project(root, hub=team, allow=[REPO]).path
    monkeypatch.delenv("KERNELFORGE_HUB")  # the default local hub: empty
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with pytest.raises(HubError, match=r"not in the local hub .*written from a local hub.*"
                                       r"hub=DIR.*--hub DIR.*\$KERNELFORGE_HUB"):
        loader.get_locked_kernel(REPO, lockfile=lock)
    with pytest.raises(HubError, match="written from a local hub"):
        download_locked(lock)
    assert loader.get_locked_kernel(REPO, lockfile=lock, hub=team).VALUE == 1


def _publish_with_dependency(hf: HfHub, tmp_path: Path, key) -> str:
    """``REPO`` (both variants) depending on ``OTHER`` version 1; returns REPO's module id
    prefix."""
    publish(hf, OTHER, tmp_path / "dep", key=key)
    module_id = uid("main")
    for variant in ("torch-cpu", "torch-cuda"):
        vdir = make_variant(tmp_path / "main", variant, module_id=module_id + variant[6:])
        meta = json.loads((vdir / "metadata.json").read_text())
        meta["kernel-depends"] = [{"repo-id": OTHER, "version": 1}]
        (vdir / "metadata.json").write_text(json.dumps(meta))
    hf.publish(REPO, tmp_path / "main", version=1, signer=key)
    return module_id


def test_download_fetches_kernel_depends_and_load_kernel_reads_only_the_cache(
    hf: HfHub, api: FakeHfApi, tmp_path: Path, key, monkeypatch
) -> None:
    pytest.importorskip("kernels.deps")
    module_id = _publish_with_dependency(hf, tmp_path, key)
    lock = lock_project(project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n'),
                        hub=hf).path
    cold = HfHub(api=api, cache=tmp_path / "cold")
    got = download_locked(lock, hub=cold)
    assert [(r, v) for r, v, _ in got] == [(REPO, "torch-cpu"), (OTHER, "torch-cpu")]
    fetched = len(api.fetches())
    assert loader.load_kernel(REPO, lockfile=lock, hub=cold).__name__ == module_id + "cpu"
    assert len(api.fetches()) == fetched  # load_kernel never downloads, dependencies included
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = HfHub(api=api, cache=tmp_path / "cold")
    assert loader.load_kernel(REPO, lockfile=lock, hub=offline).__name__ == module_id + "cpu"


def test_load_kernel_does_not_download_kernel_depends(
    hf: HfHub, api: FakeHfApi, tmp_path: Path, key
) -> None:
    pytest.importorskip("kernels.deps")
    _publish_with_dependency(hf, tmp_path, key)
    lock = lock_project(project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n'),
                        hub=hf).path
    cold = HfHub(api=api, cache=tmp_path / "cold")
    commit = read_lock(lock).require(REPO).commit
    cold.fetch_variant(REPO, commit, "torch-cpu")  # the kernel cached, its dependency not
    download_module._cache_load_files(cold, REPO, commit, "torch-cpu")
    with pytest.raises(HubError, match=f"{OTHER}.*not in the download cache"):
        loader.load_kernel(REPO, lockfile=lock, hub=cold)


# --- pinned kernel-depends ----------------------------------------------------------------

LEAF = "kernels-test/leaf"


def publish_needing(hub, repo: str, root: Path, deps: list[dict], init: str,
                    key=None) -> tuple[str, str]:
    """Publish ``repo`` version 1 (both variants) whose metadata lists ``deps`` in
    ``kernel-depends`` and whose ``__init__.py`` is ``init``; returns (commit, module id
    prefix: the variants are ``<prefix>cpu`` and ``<prefix>cuda``)."""
    module_id = uid("needs")
    for variant in ("torch-cpu", "torch-cuda"):
        vdir = make_variant(root, variant, module_id=module_id + variant[6:])
        (vdir / "__init__.py").write_text(init)
        write_metadata(vdir, module_id + variant[6:])  # digests of the new __init__.py
        meta = json.loads((vdir / "metadata.json").read_text())
        meta["kernel-depends"] = deps
        (vdir / "metadata.json").write_text(json.dumps(meta))
    return hub.publish(repo, root, version=1, signer=key).commit, module_id


def uses(*repos: str) -> str:
    """An ``__init__.py`` whose VALUE is ``10 * VALUE`` of each dependency, summed."""
    return "import kernels\nVALUE = " + " + ".join(
        f"10 * kernels.get_kernel_dep({r!r}).VALUE" for r in repos) + "\n"


def _lock_then_move_the_dependency(hf: HfHub, tmp_path: Path, key) -> tuple[Path, str, str]:
    """REPO version 1 needs OTHER version 1 (VALUE 1); after locking, OTHER's branch v1
    gets a new commit (VALUE 2). Returns (lock file, locked commit of OTHER, new one)."""
    dep_commit, _ = publish(hf, OTHER, tmp_path / "dep", key=key, value=1)
    publish_needing(hf, REPO, tmp_path / "main", [{"repo-id": OTHER, "version": 1}],
                    uses(OTHER), key=key)
    lock = lock_project(project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n'),
                        hub=hf).path
    new_commit, _ = publish(hf, OTHER, tmp_path / "dep2", key=key, value=2)
    return lock, dep_commit, new_commit


def test_lock_pins_kernel_depends_and_get_locked_kernel_loads_the_pin(
    hf: HfHub, tmp_path: Path, key
) -> None:
    pytest.importorskip("kernels.deps")
    lock, dep_commit, new_commit = _lock_then_move_the_dependency(hf, tmp_path, key)
    # the dependency's branch moved on; the locked load still takes the pinned commit
    assert loader.get_kernel(OTHER, version=1, hub=hf).VALUE == 2
    assert loader.get_locked_kernel(REPO, lockfile=lock, hub=hf).VALUE == 10
    assert new_commit != dep_commit
    entry = json.loads(lock.read_text())["kernels"][REPO]
    [dep] = entry["depends"]
    assert dep["requested"] == {"repo-id": OTHER, "version": 1}
    assert (dep["hub"], dep["repo"], dep["branch"], dep["commit"]) == ("hf", OTHER, "v1",
                                                                       dep_commit)
    assert set(dep["variants"]) == {"torch-cpu", "torch-cuda"}
    cpu = dep["variants"]["torch-cpu"]
    assert set(cpu["files"]) == {"__init__.py", "helper.py", SO_NAME, "metadata.json"}
    assert cpu["signer"] == key.public.key_id
    parsed = read_lock(lock).require(REPO)
    assert parsed.depends is not None and parsed.depends[(OTHER, 1, None)].commit == dep_commit
    assert json.loads(json.dumps(parsed.to_json())) == entry  # read and written alike


@pytest.mark.parametrize("load", ["get_locked_kernel", "load_kernel"])
def test_a_local_hub_lock_pins_kernel_depends(tmp_path: Path, env, load: str) -> None:
    pytest.importorskip("kernels.deps")
    hub = LocalHub(env["hub"])
    dep_commit, _ = publish(hub, OTHER, tmp_path / "dep", value=1)
    publish_needing(hub, REPO, tmp_path / "main", [{"repo-id": OTHER, "revision": "v1"}],
                    uses(OTHER))
    lock = lock_project(project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
                        ).path  # the default hub: the local one
    dep = read_lock(lock).require(REPO).depends[(OTHER, None, "v1")]
    assert (dep.hub, dep.commit, dep.requested) == ("local", dep_commit, {"revision": "v1"})
    publish(hub, OTHER, tmp_path / "dep2", value=2)
    assert getattr(loader, load)(REPO, lockfile=lock).VALUE == 10


def test_download_fetches_the_pinned_dependency_and_load_kernel_loads_it_offline(
    hf: HfHub, api: FakeHfApi, tmp_path: Path, key, monkeypatch
) -> None:
    pytest.importorskip("kernels.deps")
    lock, dep_commit, new_commit = _lock_then_move_the_dependency(hf, tmp_path, key)
    cold = HfHub(api=api, cache=tmp_path / "cold")
    got = download_locked(lock, hub=cold)
    assert [(r, v) for r, v, _ in got] == [(REPO, "torch-cpu"), (OTHER, "torch-cpu")]
    fetched = api.fetches()
    assert f"{OTHER}@{dep_commit[:12]}/build/torch-cpu/helper.py" in fetched
    assert not [f for f in fetched if f.startswith(f"{OTHER}@{new_commit[:12]}")]
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = HfHub(api=api, cache=tmp_path / "cold")
    assert loader.load_kernel(REPO, lockfile=lock, hub=offline).VALUE == 10


def test_a_dependency_that_differs_from_the_lock_is_refused_naming_the_file(
    hf: HfHub, api: FakeHfApi, tmp_path: Path, key, monkeypatch
) -> None:
    pytest.importorskip("kernels.deps")
    lock, _dep_commit, _new = _lock_then_move_the_dependency(hf, tmp_path, key)
    cold = HfHub(api=api, cache=tmp_path / "cold")
    dep_dir = download_locked(lock, hub=cold)[1][2]
    # a lock that pins other bytes for one of the dependency's files refuses the genuine one
    doc = json.loads(lock.read_text())
    doc["kernels"][REPO]["depends"][0]["variants"]["torch-cpu"]["files"]["helper.py"] = "AAAA"
    edited = tmp_path / "edited.lock"
    edited.write_text(json.dumps(doc))
    with pytest.raises(IntegrityError, match="changed: helper.py"):
        loader.get_locked_kernel(REPO, lockfile=edited, hub=hf)
    with pytest.raises(IntegrityError, match="changed: helper.py"):
        download_locked(edited, hub=hf)
    # the dependency's cached copy changed on disk: the offline load refuses it
    helper = dep_dir / "helper.py"
    helper.chmod(0o644)
    helper.write_text("def double(x):\n    return x\n")
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = HfHub(api=api, cache=tmp_path / "cold")
    with pytest.raises(IntegrityError, match="changed: helper.py") as info:
        loader.load_kernel(REPO, lockfile=lock, hub=offline)
    assert str(dep_dir) in str(info.value)


def test_transitive_dependencies_are_pinned_once_each(
    hf: HfHub, api: FakeHfApi, tmp_path: Path, key, monkeypatch
) -> None:
    """REPO needs MID and LEAF, MID needs LEAF: both pinned in REPO's entry, LEAF resolved,
    fetched and loaded once, and a new commit of LEAF changes nothing a locked load takes."""
    pytest.importorskip("kernels.deps")
    leaf_commit, _ = publish(hf, LEAF, tmp_path / "leaf", key=key, value=3)
    mid_commit, _ = publish_needing(hf, OTHER, tmp_path / "mid",
                                    [{"repo-id": LEAF, "version": 1}], uses(LEAF), key=key)
    publish_needing(hf, REPO, tmp_path / "main", [{"repo-id": OTHER, "version": 1},
                                                  {"repo-id": LEAF, "version": 1}],
                    uses(OTHER, LEAF), key=key)
    pinned: list[str] = []
    real = pin_module._pin_revision
    monkeypatch.setattr(pin_module, "_pin_revision",
                        lambda req, *a: pinned.append(req.repo_id) or real(req, *a))
    lock = lock_project(project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n'),
                        hub=hf).path
    assert sorted(pinned) == sorted([REPO, OTHER, LEAF])
    depends = json.loads(lock.read_text())["kernels"][REPO]["depends"]
    assert [(d["requested"]["repo-id"], d["commit"]) for d in depends] == [
        (LEAF, leaf_commit), (OTHER, mid_commit)]
    publish(hf, LEAF, tmp_path / "leaf2", key=key, value=4)
    cold = HfHub(api=api, cache=tmp_path / "cold")
    got = download_locked(lock, hub=cold)
    assert [r for r, _, _ in got] == [REPO, OTHER, LEAF]
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    module = loader.load_kernel(REPO, lockfile=lock, hub=HfHub(api=api, cache=tmp_path / "cold"))
    assert module.VALUE == 10 * 30 + 10 * 3  # LEAF 3 as pinned, not 4


def test_a_dependency_cycle_locks_without_looping(hf: HfHub, tmp_path: Path, key) -> None:
    pytest.importorskip("kernels.deps")
    publish_needing(hf, REPO, tmp_path / "a", [{"repo-id": OTHER, "version": 1}], uses(OTHER),
                    key=key)
    publish_needing(hf, OTHER, tmp_path / "b", [{"repo-id": REPO, "version": 1}], uses(REPO),
                    key=key)
    result = lock_project(project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n'),
                          hub=hf)
    [locked] = result.kernels
    assert locked.depends is not None and set(locked.depends) == {(OTHER, 1, None),
                                                                  (REPO, 1, None)}
    assert locked.depends[(REPO, 1, None)].commit == locked.commit
    got = download_locked(result.path, hub=hf)
    assert [r for r, _, _ in got] == [REPO, OTHER]  # each fetched once
    with pytest.raises(HubError, match=f"cyclic kernel dependency: {REPO} -> {OTHER} -> {REPO}"):
        loader.get_locked_kernel(REPO, lockfile=result.path, hub=hf)


@pytest.mark.parametrize(("edit", "why"), [
    ("drop", "the lock was written before kernelforge pinned dependencies"),
    ("empty", f"its entry for {REPO} does not list it"),
])
def test_an_unpinned_dependency_loads_as_before_with_a_warning(
    hf: HfHub, api: FakeHfApi, tmp_path: Path, key, caplog, edit: str, why: str
) -> None:
    """A lock written before dependencies were pinned (no 'depends') loads them as
    get_kernel chooses them, as it always did; so does one whose 'depends' leaves one out.
    Both say so, naming the dependency and the fix."""
    pytest.importorskip("kernels.deps")
    lock, _dep_commit, new_commit = _lock_then_move_the_dependency(hf, tmp_path, key)
    doc = json.loads(lock.read_text())
    if edit == "drop":
        del doc["kernels"][REPO]["depends"]
    else:
        doc["kernels"][REPO]["depends"] = []
    lock.write_text(json.dumps(doc))
    assert (read_lock(lock).require(REPO).depends is None) == (edit == "drop")
    with caplog.at_level(logging.WARNING):
        assert loader.get_locked_kernel(REPO, lockfile=lock, hub=hf).VALUE == 20  # the newest
    message = (f"{OTHER} version 1 (a kernel-depends entry of {REPO}) is not pinned by "
               f"{lock} ({why})")
    assert message in caplog.text and "run 'kernelforge lock' on the project again" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kernelforge.lock"):
        got = download_locked(lock, hub=HfHub(api=api, cache=tmp_path / "cold"))
    assert message in caplog.text
    assert [(r, v) for r, v, _ in got] == [(REPO, "torch-cpu"), (OTHER, "torch-cpu")]
    assert f"{OTHER}@{new_commit[:12]}/build/torch-cpu/helper.py" in api.fetches()


_PIN = {"requested": {"repo-id": OTHER, "version": 1}, "commit": "2" * 40,
        "variants": {"torch-cpu": {"files": {"metadata.json": "x"}}}}


@pytest.mark.parametrize(("depends", "problem"), [
    ({}, "'depends' must be a list"),
    ([{**_PIN, "requested": {"repo-id": OTHER}}],
     r"depends\[0\]: 'requested': needs exactly one of 'version' or 'revision'"),
    ([{**_PIN, "requested": {"repo-id": OTHER, "version": "1"}}],
     r"depends\[0\]: 'requested': 'version' must be a non-negative integer"),
    ([{**_PIN, "commit": "abc"}],
     rf"depends\[0\] \({OTHER} version 1\): 'commit' must be a 40-hex"),
    ([{**_PIN, "variants": {}}], rf"depends\[0\] \({OTHER} version 1\): 'variants' must map"),
    ([_PIN, _PIN], rf"depends\[1\] \({OTHER} version 1\): pinned twice"),
    ([{**_PIN, "depends": []}], "holds no 'depends' of its own"),
])
def test_a_malformed_dependency_pin_names_file_kernel_and_field(
    tmp_path: Path, depends: object, problem: str
) -> None:
    lock = tmp_path / "kernelforge.lock"
    lock.write_text(json.dumps({"format": "kernelforge-lock/1", "kernels": {REPO: {
        "commit": "1" * 40, "variants": {"torch-cpu": {"files": {"metadata.json": "x"}}},
        "depends": depends}}}))
    with pytest.raises(LockError, match=problem) as info:
        read_lock(lock)
    assert str(info.value).startswith(f"{lock}: kernel {REPO!r}: ")
    assert "run 'kernelforge lock' again" in str(info.value)


def test_a_malformed_kernel_depends_entry_is_refused_when_locking(
    hf: HfHub, tmp_path: Path, key
) -> None:
    publish_needing(hf, REPO, tmp_path / "main", [{"repo-id": OTHER}], "VALUE = 1\n", key=key)
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    with pytest.raises(HubError, match=r"build/torch-c\w+/metadata.json: 'kernel-depends': "
                                       r"entry .*needs exactly one of"):
        lock_project(root, hub=hf)
    assert not (root / "kernelforge.lock").exists()


def test_locking_a_dependency_that_cannot_be_found_names_who_needs_it(
    hf: HfHub, tmp_path: Path, key, capsys, monkeypatch
) -> None:
    publish_needing(hf, REPO, tmp_path / "main", [{"repo-id": LEAF, "version": 2}],
                    "VALUE = 1\n", key=key)
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    with pytest.raises(HubError, match=rf"^{LEAF} version 2, a kernel-depends entry of {REPO} "
                                       r"\(variant torch-c\w+\): "):
        lock_project(root, hub=hf)
    publish(hf, LEAF, tmp_path / "leaf", version=2, key=key)
    monkeypatch.setattr("kernelforge.hub.as_hub", lambda hub: hf)
    assert main(["lock", str(root), "--hub", "hf"]) == 0
    leaf = read_lock(root).require(REPO).depends[(LEAF, 2, None)]
    assert (f"  needs {LEAF} version 2: branch v2, commit {leaf.commit[:12]} (hf), 2 variants"
            in capsys.readouterr().out)


def test_a_dependency_whose_signature_does_not_verify_is_refused_naming_who_needs_it(
    hf: HfHub, tmp_path: Path, key
) -> None:
    """The refusal of a trusted key's signature that does not verify keeps its type (and
    the variant it names), and says which kernel needs the dependency."""
    commit, _module_id = publish(hf, OTHER, tmp_path / "dep", key=key)
    publish_needing(hf, REPO, tmp_path / "main", [{"repo-id": OTHER, "version": 1}],
                    uses(OTHER), key=key)
    sig = hf._api.tree(OTHER, commit) / "build" / "torch-cpu.sig"
    doc = json.loads(sig.read_text())
    raw = bytearray(base64.b64decode(doc["signature"]))
    raw[0] ^= 0x01  # still well-formed, no longer the key's signature
    doc["signature"] = base64.b64encode(bytes(raw)).decode("ascii")
    hf._api.tamper(OTHER, commit, "build/torch-cpu.sig", json.dumps(doc).encode())
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    with pytest.raises(SignatureMismatchError, match=rf"^{OTHER} version 1, a kernel-depends "
                       rf"entry of {REPO} \(variant torch-c\w+\): {OTHER}: the signature "
                       r"build/torch-cpu.sig by trusted key .* does not verify") as info:
        lock_project(root, hub=hf)
    assert info.value.variant == "torch-cpu"
    assert not (root / "kernelforge.lock").exists()


def _bad_signature(api: FakeHfApi, repo: str, commit: str, variant: str) -> None:
    """Have the hub serve ``variant``'s signature still well-formed but no longer the
    key's, from now on."""
    path = f"build/{variant}.sig"
    doc = json.loads((api.tree(repo, commit) / path).read_text())
    raw = bytearray(base64.b64decode(doc["signature"]))
    raw[0] ^= 0x01
    doc["signature"] = base64.b64encode(bytes(raw)).decode("ascii")
    api.tamper(repo, commit, path, json.dumps(doc).encode())


def test_download_all_variants_skips_a_dependency_s_refused_variant_no_load_here_takes(
    hf: HfHub, api: FakeHfApi, tmp_path: Path, key, monkeypatch
) -> None:
    """A pinned dependency's variant follows the rule the lock's kernels follow: with
    --all-variants, one whose signature by a trusted key does not verify and that a load
    here does not take (OTHER's torch-cuda, on this CPU) is skipped, reported and not
    fetched, and the download goes on; REPO then loads offline. Where it is the variant
    a load here takes, the download fails naming it."""
    pytest.importorskip("kernels.deps")
    dep_commit, _ = publish(hf, OTHER, tmp_path / "dep", key=key)
    publish_needing(hf, REPO, tmp_path / "main", [{"repo-id": OTHER, "version": 1}],
                    uses(OTHER), key=key)
    lock = lock_project(project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n'),
                        hub=hf).path  # sound when locked
    _bad_signature(api, OTHER, dep_commit, "torch-cuda")
    progress = DownloadProgress()
    got = download_locked(lock, hub=HfHub(api=api, cache=tmp_path / "cold"),
                          all_variants=True, progress=progress)
    assert [(r, v) for r, v, _path in got] == [
        (REPO, "torch-cpu"), (OTHER, "torch-cpu"), (REPO, "torch-cuda")]
    [(repo, variant, why)] = progress.skipped
    assert (repo, variant) == (OTHER, "torch-cuda")
    assert why.endswith("and a load on this machine takes variant torch-cpu"), why
    assert "does not verify" in why, why
    cuda = f"{OTHER}@{dep_commit[:12]}/build/torch-cuda/"
    # judged by its metadata.json and signature; none of its files fetched
    assert {f for f in api.fetches() if f.startswith(cuda)} == {f"{cuda}metadata.json"}
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = HfHub(api=api, cache=tmp_path / "cold")
    assert loader.load_kernel(REPO, lockfile=lock, hub=offline).VALUE == 10

    monkeypatch.delenv("HF_HUB_OFFLINE")
    api.come_up()
    _bad_signature(api, OTHER, dep_commit, "torch-cpu")
    with pytest.raises(SignatureMismatchError, match=rf"^{OTHER} \(variant torch-cpu\): not "
                       "fetched: it is the variant a load on this machine takes"):
        download_locked(lock, hub=HfHub(api=api, cache=tmp_path / "fresh"), all_variants=True)


def _needing_on_cuda_only(hf: HfHub, repo: str, root: Path, key, dep: str) -> str:
    """Publish ``repo`` version 1 whose torch-cuda build lists ``dep`` version 1 in
    ``kernel-depends`` and whose torch-cpu build needs nothing; returns the commit."""
    for variant in ("torch-cpu", "torch-cuda"):
        vdir = make_variant(root, variant, module_id=uid("needs"))
        if variant == "torch-cuda":
            meta = json.loads((vdir / "metadata.json").read_text())
            meta["kernel-depends"] = [{"repo-id": dep, "version": 1}]
            (vdir / "metadata.json").write_text(json.dumps(meta))
    return hf.publish(repo, root, version=1, signer=key).commit


def test_download_all_variants_skips_a_dependency_no_variant_loaded_here_needs(
    hf: HfHub, api: FakeHfApi, tmp_path: Path, key
) -> None:
    """Only REPO's torch-cuda build needs OTHER, and this CPU loads REPO's torch-cpu: a
    refused OTHER torch-cpu is no variant a load here takes, so --all-variants skips it
    and exits 0, as the download without it does. Before, it failed, saying it was the
    variant a load on this machine takes."""
    dep_commit, _ = publish(hf, OTHER, tmp_path / "dep", key=key)
    _needing_on_cuda_only(hf, REPO, tmp_path / "main", key, OTHER)
    lock = lock_project(project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n'),
                        hub=hf).path
    _bad_signature(api, OTHER, dep_commit, "torch-cpu")
    progress = DownloadProgress()
    got = download_locked(lock, hub=HfHub(api=api, cache=tmp_path / "cold"),
                          all_variants=True, progress=progress)
    assert [(r, v) for r, v, _path in got] == [
        (REPO, "torch-cpu"), (REPO, "torch-cuda"), (OTHER, "torch-cuda")]
    [(repo, variant, why)] = progress.skipped
    assert (repo, variant) == (OTHER, "torch-cpu")
    assert why.endswith("and a load on this machine takes no variant that depends on it"), why
    assert [(r, v) for r, v, _path in download_locked(
        lock, hub=HfHub(api=api, cache=tmp_path / "cold"))] == [(REPO, "torch-cpu")]


def test_download_all_variants_skips_a_transitive_dependency_no_load_here_needs(
    hf: HfHub, api: FakeHfApi, tmp_path: Path, key
) -> None:
    """REPO's torch-cpu, which this CPU loads, needs OTHER; only OTHER's torch-cuda,
    which no load here takes, needs LEAF. A refused LEAF torch-cpu is skipped: what no
    variant a load here takes reaches, two steps down too, never fails the download."""
    leaf_commit, _ = publish(hf, LEAF, tmp_path / "leaf", key=key)
    _needing_on_cuda_only(hf, OTHER, tmp_path / "mid", key, LEAF)
    publish_needing(hf, REPO, tmp_path / "main", [{"repo-id": OTHER, "version": 1}],
                    uses(OTHER), key=key)
    lock = lock_project(project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n'),
                        hub=hf).path
    _bad_signature(api, LEAF, leaf_commit, "torch-cpu")
    progress = DownloadProgress()
    got = download_locked(lock, hub=HfHub(api=api, cache=tmp_path / "cold"),
                          all_variants=True, progress=progress)
    assert [(r, v) for r, v, _path in got] == [
        (REPO, "torch-cpu"), (OTHER, "torch-cpu"), (OTHER, "torch-cuda"), (LEAF, "torch-cuda"),
        (REPO, "torch-cuda")]
    assert [(r, v) for r, v, _why in progress.skipped] == [(LEAF, "torch-cpu")]


def test_download_all_variants_judges_a_dependency_again_where_a_load_here_needs_it(
    hf: HfHub, api: FakeHfApi, tmp_path: Path, key, monkeypatch
) -> None:
    """On a GPU, REPO's torch-cpu build, which no load here takes, comes first and
    reaches OTHER first; REPO's torch-cuda, which a load here takes, needs OTHER too. A
    refused OTHER torch-cuda, skipped where only torch-cpu needed it, fails the download
    once this machine's variant reaches it, and is not listed as skipped."""
    _on_a_gpu(monkeypatch)
    dep_commit, _ = publish(hf, OTHER, tmp_path / "dep", key=key)
    publish_needing(hf, REPO, tmp_path / "main", [{"repo-id": OTHER, "version": 1}],
                    uses(OTHER), key=key)
    lock = lock_project(project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n'),
                        hub=hf).path
    # sound, each variant is fetched and listed once
    got = download_locked(lock, hub=HfHub(api=api, cache=tmp_path / "sound"),
                          all_variants=True)
    assert [(r, v) for r, v, _path in got] == [
        (REPO, "torch-cpu"), (OTHER, "torch-cpu"), (OTHER, "torch-cuda"), (REPO, "torch-cuda")]
    _bad_signature(api, OTHER, dep_commit, "torch-cuda")
    progress = DownloadProgress()
    with pytest.raises(SignatureMismatchError, match=rf"^{OTHER} \(variant torch-cuda\): not "
                       "fetched: it is the variant a load on this machine takes"):
        download_locked(lock, hub=HfHub(api=api, cache=tmp_path / "cold"),
                        all_variants=True, progress=progress)
    assert [(r, v) for r, v, _path in progress.fetched] == [
        (REPO, "torch-cpu"), (OTHER, "torch-cpu"), (REPO, "torch-cuda")]
    assert progress.skipped == []
    assert progress.left == [f"the kernel-depends of {REPO} torch-cuda"]
    with pytest.raises(SignatureMismatchError, match=rf"^{OTHER} \(variant torch-cuda\): not "
                       "fetched: it is the variant a load on this machine takes"):
        download_locked(lock, hub=HfHub(api=api, cache=tmp_path / "cold"))


def _on_a_gpu(monkeypatch) -> None:
    """Present this process as a CUDA 12.8 one with a GPU of compute capability 8.0."""
    from kernelforge import variants

    gpu = dataclasses.replace(variants.detect_system(), backend="cuda",
                              backend_version=(12, 8), gpu_archs=("8.0",))
    monkeypatch.setattr(variants, "detect_system", lambda: gpu)


def test_a_locked_load_checks_gpu_archs_unless_told_not_to(
    hf: HfHub, tmp_path: Path, key, monkeypatch
) -> None:
    """A locked load chooses as any load does: a CUDA build whose archs do not cover this
    GPU is passed over for one that fits, and taken with check_arch=False."""
    _on_a_gpu(monkeypatch)
    make_variant(tmp_path / "p", "torch-universal", module_id=uid("arch"))
    cuda = make_variant(tmp_path / "p", "torch-cuda", module_id=uid("arch"))
    write_metadata(cuda, uid("arch"), archs=["9.0"])
    hf.publish(REPO, tmp_path / "p", version=1, signer=key)
    lock = lock_project(project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n'),
                        hub=hf).path
    assert loader.kernel_info(REPO, lockfile=lock, hub=hf).variant == "torch-universal"
    assert loader.kernel_info(REPO, lockfile=lock, hub=hf, check_arch=False
                              ).variant == "torch-cuda"


# --- Hugging Face's kernels.lock records no hub ---------------------------------------------


def _no_hf(monkeypatch) -> None:
    """Fail the test on any use of the Hugging Face Hub's client."""
    def refuse(self):
        raise AssertionError("the Hugging Face Hub was asked")
    monkeypatch.setattr(HfHub, "_client", refuse)


def test_a_kernels_lock_loads_from_the_local_hub_that_holds_its_commit(
    tmp_path: Path, env, monkeypatch
) -> None:
    """A kernels.lock records no hub: with none given, the default applies (the local hub
    when it holds the repository at the locked commit), for every locked entry point."""
    hub = LocalHub(env["hub"])
    commit, module_id = publish(hub, REPO, tmp_path / "v1")
    root = project(tmp_path, f'[tool.kernels.dependencies]\n"{REPO}" = 1\n')
    result = lock_project(root)  # from the local hub, which holds it
    (root / "kernelforge.lock").unlink()  # a project that carries only HF's kernels.lock
    lock = root / "kernels.lock"
    assert result.hf_path == lock
    _no_hf(monkeypatch)
    assert loader.load_kernel(REPO, lockfile=lock).__name__ == module_id  # no download
    assert loader.get_locked_kernel(REPO, lockfile=lock).__name__ == module_id
    info = loader.kernel_info(REPO, lockfile=lock)
    assert (info.hub, info.commit) == (f"local hub {hub.root}", commit)
    assert [(r, v) for r, v, _ in download_locked(root)] == [(REPO, "torch-cpu")]
    assert main(["download", str(root)]) == 0
    locked = read_lock(lock).require(REPO)
    assert (locked.hub, locked.commit) == (None, commit)  # recorded as unknown


def test_a_kernels_lock_of_a_commit_the_local_hub_lacks_uses_the_hf_hub(
    tmp_path: Path, env, monkeypatch
) -> None:
    from kernelforge.locate import hub_for_lock

    hub = LocalHub(env["hub"])
    commit, _ = publish(hub, REPO, tmp_path / "v1")
    lock = tmp_path / "kernels.lock"
    lock.write_text(json.dumps([
        {"dependency": {"repo-id": REPO, "version": 1}, "lock": {"commit": commit}},
        {"dependency": {"repo-id": OTHER, "version": 1}, "lock": {"commit": "1" * 40}},
        {"dependency": {"repo-id": "kernels-test/third", "version": 1},
         "lock": {"commit": "2" * 40}}]))
    parsed = read_lock(lock)
    publish(hub, "kernels-test/third", tmp_path / "t")  # the repository, another commit
    assert isinstance(hub_for_lock(None, parsed.require(REPO)), LocalHub)
    assert isinstance(hub_for_lock(None, parsed.require(OTHER)), HfHub)  # not in the local hub
    assert isinstance(hub_for_lock(None, parsed.require("kernels-test/third")), HfHub)
    assert hub_for_lock(hub, parsed.require(OTHER)) is hub  # hub= decides when given
    monkeypatch.setenv("KERNELFORGE_HUB", "hf")  # the default hub named: that one
    assert isinstance(hub_for_lock(None, parsed.require(REPO)), HfHub)


@pytest.mark.parametrize("where", ["typo", "other hub"])
def test_a_kernels_lock_the_hf_hub_lacks_says_the_local_hub_was_looked_in_first(
    hf: HfHub, tmp_path: Path, env, monkeypatch, capsys, where: str
) -> None:
    """A kernels.lock records no hub: an entry the default local hub lacks goes to the
    Hugging Face Hub, whose error alone ('repository not found') hides that the kernel
    was looked for in the local hub first, and which one ($KERNELFORGE_HUB mistyped)."""
    hub = LocalHub(tmp_path / "team-hub")
    commit, _ = publish(hub, REPO, tmp_path / "v1")
    lock = tmp_path / "kernels.lock"
    lock.write_text(json.dumps([{"dependency": {"repo-id": REPO, "version": 1},
                                 "lock": {"commit": commit}}]))
    from kernelforge.hub import as_hub

    monkeypatch.setattr("kernelforge.locate.as_hub",  # the Hugging Face Hub lacks REPO
                        lambda h: hf if h == "hf" else as_hub(h))
    default = tmp_path / "typo-hub" if where == "typo" else env["hub"]
    if where == "other hub":  # the default local hub, holding another kernel
        publish(LocalHub(default), OTHER, tmp_path / "other")
    monkeypatch.setenv("KERNELFORGE_HUB", str(default))
    missing = ", which does not exist" if where == "typo" else ""
    said = (f"repository {REPO!r} is not in the local hub {default} (chosen by "
            f"KERNELFORGE_HUB={default}{missing}), and a kernels.lock records no hub, so the "
            "Hugging Face Hub was asked (name the hub the kernel was locked from: hub=DIR in "
            "Python, --hub DIR on the command line, or $KERNELFORGE_HUB): ")
    calls = [lambda: loader.get_locked_kernel(REPO, lockfile=lock),
             lambda: loader.load_kernel(REPO, lockfile=lock),
             lambda: loader.kernel_info(REPO, lockfile=lock),
             lambda: download_locked(lock),
             lambda: download_locked(lock, all_variants=True)]
    for call in calls:
        with pytest.raises(HubError) as info:
            call()
        assert str(info.value).startswith(said), str(info.value)
    assert main(["download", str(lock)]) == 1
    assert said in capsys.readouterr().err
    # the hub named: its own error, nothing about a local hub
    with pytest.raises(HubError) as info:
        loader.get_locked_kernel(REPO, lockfile=lock, hub=hf)
    assert "local hub" not in str(info.value)
    # the right hub named: it loads
    assert loader.get_locked_kernel(REPO, lockfile=lock, hub=hub).VALUE == 1


# --- load_kernel never downloads, and says so ------------------------------------------------


@pytest.mark.parametrize("kind", ["kernelforge.lock", "kernels.lock", "metadata cached"])
def test_load_kernel_says_it_never_downloads_not_that_hf_hub_offline_is_set(
    hf: HfHub, api: FakeHfApi, tmp_path: Path, key, kind: str
) -> None:
    """Whatever load_kernel misses (a metadata.json, a file list, the variant) is missing
    because load_kernel reads the download cache only; HF_HUB_OFFLINE is not set."""
    commit, _ = publish(hf, REPO, tmp_path / "v1", key=key)
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    lock = lock_project(root, hub=hf).path
    if kind == "kernels.lock":
        lock = tmp_path / "kernels.lock"
        lock.write_text(json.dumps([{"dependency": {"repo-id": REPO, "version": 1},
                                     "lock": {"commit": commit}}]))
    cold = HfHub(api=api, cache=tmp_path / "cold")
    if kind == "metadata cached":  # what kernel_info reads, but not the variant
        loader.kernel_info(REPO, lockfile=lock, hub=cold)
    fetched = api.fetches()
    with pytest.raises(HubError) as info:
        loader.load_kernel(REPO, lockfile=lock, hub=cold)
    message = str(info.value)
    assert "is not in the download cache" in message
    assert "load_kernel never downloads" in message and "HF_HUB_OFFLINE" not in message
    assert "run 'kernelforge download'" in message and "get_locked_kernel" in message
    assert api.fetches() == fetched  # nothing was downloaded


def test_the_kernels_lock_pins_kernel_depends_for_both_loaders(
    hf: HfHub, tmp_path: Path, key
) -> None:
    """The kernels.lock written beside kernelforge.lock lists each kernel and each
    kernel-depends request it pins, sorted as Hugging Face's ``kernels lock`` writes it;
    their loader resolves a dependency by its exact request in that list, and so does
    ours."""
    pytest.importorskip("kernels.deps")
    from kernels._rust import KernelLocks

    dep_commit, _ = publish(hf, OTHER, tmp_path / "dep", key=key, value=1)
    publish_needing(hf, REPO, tmp_path / "main", [{"repo-id": OTHER, "version": 1}],
                    uses(OTHER), key=key)
    result = lock_project(project(tmp_path, f'[tool.kernels.dependencies]\n"{REPO}" = 1\n'),
                          hub=hf)
    assert result.hf_path is not None
    doc = json.loads(result.hf_path.read_text())
    assert [e["dependency"] for e in doc] == [{"repo-id": OTHER, "version": 1},  # sorted
                                             {"repo-id": REPO, "version": 1}]
    # Hugging Face's reader takes it, and finds the dependency's exact request
    theirs = KernelLocks.from_json(result.hf_path.read_text())
    [wanted] = KernelLocks.from_json(json.dumps(
        [{"dependency": {"repo-id": OTHER, "version": 1}, "lock": {"commit": "0" * 40}}])).keys()
    assert theirs.get(wanted).commit == dep_commit
    # after the dependency's branch moves on, ours still loads the pinned commit from it
    publish(hf, OTHER, tmp_path / "dep2", key=key, value=2)
    assert loader.get_locked_kernel(REPO, lockfile=result.hf_path, hub=hf,
                                    trust_remote_code=True).VALUE == 10


def test_a_kernels_lock_in_their_order_pins_the_dependency(
    hf: HfHub, api: FakeHfApi, tmp_path: Path, key, caplog, monkeypatch
) -> None:
    """A kernels.lock whose dependency entry comes first (Hugging Face's ``kernels lock``
    sorts by repository): that entry pins the dependency for the kernel that needs it,
    with no unpinned warning."""
    pytest.importorskip("kernels.deps")
    dep_commit, _ = publish(hf, OTHER, tmp_path / "dep", key=key, value=1)
    main_commit, _ = publish_needing(hf, REPO, tmp_path / "main",
                                     [{"repo-id": OTHER, "version": 1}], uses(OTHER), key=key)
    publish(hf, OTHER, tmp_path / "dep2", key=key, value=2)
    lock = tmp_path / "kernels.lock"
    lock.write_text(json.dumps([
        {"dependency": {"repo-id": OTHER, "version": 1}, "lock": {"commit": dep_commit}},
        {"dependency": {"repo-id": REPO, "version": 1}, "lock": {"commit": main_commit}},
    ]))
    with caplog.at_level(logging.WARNING, logger="kernelforge"):
        module = loader.get_locked_kernel(REPO, lockfile=lock, hub=hf, trust_remote_code=True)
    assert module.VALUE == 10
    assert not [r for r in caplog.records if "not pinned" in r.getMessage()]
    # download fetches the pinned commit of the dependency, and an offline load takes it
    cold = HfHub(api=api, cache=tmp_path / "cold")
    got = download_locked(lock, hub=cold)
    assert [(r, v) for r, v, _ in got] == [(OTHER, "torch-cpu"), (REPO, "torch-cpu")]
    assert not [f for f in api.fetches() if f.startswith(f"{OTHER}@") and
                not f.startswith(f"{OTHER}@{dep_commit[:12]}")]
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = HfHub(api=api, cache=tmp_path / "cold")
    assert loader.load_kernel(REPO, lockfile=lock, hub=offline,
                              trust_remote_code=True).VALUE == 10



#: a dependency whose name sorts after REPO's, so that REPO's kernel-depends reach it first
ZETA = "kernels-test/zeta"


@pytest.mark.parametrize("table", ["kernels", "kernelforge"])
def test_download_says_a_locked_dependency_sorted_after_its_user_once(
    tmp_path: Path, env, capsys, table: str
) -> None:
    """REPO needs ZETA, and the lock lists both (a kernels.lock always does; a project
    may list both). The download reaches ZETA first through REPO's kernel-depends, then
    as a kernel of the lock: each variant is listed once, where it was fetched first,
    with --all-variants too, and the command prints one line for it."""
    hub = LocalHub(env["hub"])
    publish(hub, ZETA, tmp_path / "zeta")
    publish_needing(hub, REPO, tmp_path / "main", [{"repo-id": ZETA, "version": 1}],
                    uses(ZETA))
    result = lock_project(project(tmp_path, f'[tool.{table}.dependencies]\n"{REPO}" = 1\n'
                                  f'"{ZETA}" = 1\n'), hub=hub)
    lock = result.hf_path if table == "kernels" else result.path
    assert lock is not None and sorted(read_lock(lock).kernels) == [REPO, ZETA]
    got = download_locked(lock, hub=hub)
    assert [(r, v) for r, v, _path in got] == [(REPO, "torch-cpu"), (ZETA, "torch-cpu")]
    assert len({path for _r, _v, path in got}) == 2
    every = download_locked(lock, hub=hub, all_variants=True)
    assert [(r, v) for r, v, _path in every] == [
        (REPO, "torch-cpu"), (ZETA, "torch-cpu"), (ZETA, "torch-cuda"), (REPO, "torch-cuda")]
    assert main(["download", str(lock)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [f"{REPO} torch-cpu", f"{ZETA} torch-cpu"]


#: a dependency whose name sorts before REPO's: fetched as a kernel of the lock first
ALPHA = "kernels-test/alpha"


def test_download_says_a_locked_kernel_an_unpinned_dependency_reaches_again_once(
    tmp_path: Path, env, capsys
) -> None:
    """REPO needs ALPHA, the lock lists both, and REPO's entry pins no ``depends`` (a
    lock written before kernelforge pinned them). ALPHA is fetched first as a kernel of
    the lock, then reached again through REPO's kernel-depends, as a load would choose
    it: the same variant directory, listed once, where it was fetched first."""
    hub = LocalHub(env["hub"])
    publish(hub, ALPHA, tmp_path / "alpha")
    publish_needing(hub, REPO, tmp_path / "main", [{"repo-id": ALPHA, "version": 1}],
                    uses(ALPHA))
    lock = lock_project(project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n'
                                f'"{ALPHA}" = 1\n'), hub=hub).path
    doc = json.loads(lock.read_text())
    del doc["kernels"][REPO]["depends"]
    lock.write_text(json.dumps(doc))
    assert read_lock(lock).require(REPO).depends is None
    got = download_locked(lock, hub=hub)
    assert [(r, v) for r, v, _path in got] == [(ALPHA, "torch-cpu"), (REPO, "torch-cpu")]
    assert main(["download", str(lock)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [f"{ALPHA} torch-cpu", f"{REPO} torch-cpu"]


def test_a_project_kernel_shadowed_by_a_dependency_in_the_kernels_lock_is_said(
    hf: HfHub, tmp_path: Path, key, caplog
) -> None:
    """The project asks for OTHER version 2 and REPO, whose kernel-depends asks for OTHER
    version 1. kernels.lock can name OTHER only by request, and a load by name takes the
    first in sorted order (version 1), in Hugging Face's loader and ours alike; locking
    says so, and kernelforge.lock keeps the two apart."""
    pytest.importorskip("kernels.deps")
    from kernels.locking import get_locked_kernel_revision

    v1, _ = publish(hf, OTHER, tmp_path / "dep1", key=key, value=1)
    v2, _ = publish(hf, OTHER, tmp_path / "dep2", version=2, key=key, value=2)
    publish_needing(hf, REPO, tmp_path / "main", [{"repo-id": OTHER, "version": 1}],
                    uses(OTHER), key=key)
    with caplog.at_level(logging.WARNING, logger="kernelforge"):
        result = lock_project(project(tmp_path, "[tool.kernels.dependencies]\n"
                                                f'"{REPO}" = 1\n"{OTHER}" = 2\n'), hub=hf)
    assert result.hf_path is not None
    assert [(e["dependency"]["repo-id"], e["dependency"]["version"])
            for e in json.loads(result.hf_path.read_text())] == [(OTHER, 1), (OTHER, 2),
                                                                 (REPO, 1)]
    said = [r.getMessage() for r in caplog.records if "takes its first entry" in r.getMessage()]
    assert len(said) == 1 and f"{OTHER} version 1" in said[0] and "version 2" in said[0]
    locks, dep = get_locked_kernel_revision(OTHER, result.hf_path)
    assert locks[dep].commit == v1 == read_lock(result.hf_path).require(OTHER).commit
    assert read_lock(result.path).require(OTHER).commit == v2


# --- one repository, one spelling ------------------------------------------------------------


@pytest.mark.parametrize(("text", "where"), [
    ('[tool.kernelforge.dependencies]\n"Org/Relu" = 1\n"org/relu" = 1\n',
     r"both in \[tool.kernelforge.dependencies\]"),
    ('[tool.kernelforge.dependencies]\n"Org/Relu" = 1\n"org/relu" = 2\n',
     r"both in \[tool.kernelforge.dependencies\]"),
    ('[tool.kernelforge.dependencies]\n"Org/Relu" = 1\n[tool.kernels.dependencies]\n'
     '"org/relu" = 1\n', r"in \[tool.kernelforge.dependencies\] and \[tool.kernels.dependencies\]"),
    ('[tool.kernelforge.dependencies]\n"Org/Relu" = 1\n[tool.kernels.dependencies]\n'
     '"org/relu" = 2\n', r"in \[tool.kernelforge.dependencies\] and \[tool.kernels.dependencies\]"),
])
def test_two_spellings_of_one_repository_are_refused(tmp_path: Path, text: str,
                                                     where: str) -> None:
    """Repository ids ignore case: two spellings are one kernel listed twice, whether
    their requirements agree or not, in one table or across both."""
    root = project(tmp_path, text)
    with pytest.raises(LockError, match=rf"pyproject.toml: 'Org/Relu' and 'org/relu' \({where}\) "
                                        r"name one repository .*; keep one of them"):
        read_requirements(root)
    with pytest.raises(LockError, match="name one repository"):
        lock_project(root)
    assert not (root / "kernelforge.lock").exists()


def test_a_kernelforge_lock_with_two_spellings_of_one_repository_is_refused(
    tmp_path: Path
) -> None:
    entry = {"commit": "1" * 40, "variants": {"torch-cpu": {"files": {"metadata.json": "x"}}}}
    lock = tmp_path / "kernelforge.lock"
    lock.write_text(json.dumps({"format": "kernelforge-lock/1",
                                "kernels": {REPO: entry, REPO.upper(): entry}}))
    with pytest.raises(LockError, match=rf"{lock}: 'kernels' lists {REPO!r} and "
                                        rf"{REPO.upper()!r}, which name one repository .*"
                                        r"run 'kernelforge lock' again"):
        read_lock(lock)


# --- a redirected kernel and Hugging Face's kernels.lock -------------------------------------


def test_a_redirected_kernel_is_left_out_of_kernels_lock_with_a_warning(
    tmp_path: Path, env, caplog
) -> None:
    """kernels.lock can only pin a commit of the repository it names, and Hugging Face's
    loader follows no redirect: the destination's commit under the original id would
    name a commit that repository lacks. The entry is left out (their loader says it is
    not locked) with a warning naming the destination; kernelforge.lock keeps the
    redirect and loads it."""
    hub = LocalHub(env["hub"])
    commit, module_id = publish(hub, OTHER, tmp_path / "new")
    hub.set_status(REPO, f'kind = "redirect"\ndestination = "{OTHER}"\n')
    root = project(tmp_path, f'[tool.kernels.dependencies]\n"{REPO}" = 1\n')
    with caplog.at_level(logging.WARNING, logger="kernelforge.lock"):
        result = lock_project(root, hub=hub)
    assert result.hf_path is not None
    assert json.loads(result.hf_path.read_text()) == []
    [said] = [r for r in caplog.records if r.name == "kernelforge.lock"]
    assert said.levelno == logging.WARNING
    assert (f"kernels.lock: {REPO} is redirected to {OTHER} (kernel-status.toml)"
            in said.getMessage())
    assert f"leaves {REPO} version 1 out" in said.getMessage()
    assert (f"Depend on {OTHER} instead (list it in [tool.kernels.dependencies] in place of "
            f"{REPO})" in said.getMessage())
    entry = read_lock(result.path).require(REPO)
    assert (entry.repo, entry.commit) == (OTHER, commit)
    assert loader.get_locked_kernel(REPO, lockfile=result.path, hub=hub).__name__ == module_id
    kernels_locking = pytest.importorskip("kernels.locking")
    with pytest.raises(ValueError, match=f"Kernel `{REPO}` is not locked"):
        kernels_locking.get_locked_kernel_revision(REPO, result.hf_path)


def test_a_redirected_dependency_is_left_out_of_kernels_lock_with_a_warning(
    tmp_path: Path, env, caplog
) -> None:
    hub = LocalHub(env["hub"])
    publish(hub, LEAF, tmp_path / "new")
    hub.set_status(OTHER, f'kind = "redirect"\ndestination = "{LEAF}"\n')
    main_commit, _ = publish_needing(hub, REPO, tmp_path / "main",
                                     [{"repo-id": OTHER, "version": 1}], "VALUE = 1\n")
    root = project(tmp_path, f'[tool.kernels.dependencies]\n"{REPO}" = 1\n')
    with caplog.at_level(logging.WARNING, logger="kernelforge.lock"):
        result = lock_project(root, hub=hub)
    assert result.hf_path is not None
    assert json.loads(result.hf_path.read_text()) == [
        {"dependency": {"repo-id": REPO, "version": 1}, "lock": {"commit": main_commit}}]
    said = [r.getMessage() for r in caplog.records if r.name == "kernelforge.lock"]
    assert len(said) == 1  # once, though both variants list it
    assert f"{OTHER} is redirected to {LEAF}" in said[0]
    assert (f"It is a kernel-depends entry of {REPO}'s kernels: ask their publisher to depend "
            f"on {LEAF} instead." in said[0])
    assert read_lock(result.path).require(REPO).depends[(OTHER, 1, None)].repo == LEAF


# --- downloading a kernels.lock: its dependencies this system does not use ------------------


def test_download_of_a_kernels_lock_skips_a_dependency_no_variant_here_uses(
    tmp_path: Path, env, caplog
) -> None:
    """REPO's CUDA variant needs OTHER, which has CUDA builds only; on a CPU-only system
    the load takes REPO's CPU variant and never OTHER. kernels.lock lists OTHER beside
    REPO (a flat list): download fetches what a load here uses and says it skips OTHER.
    A kernel no other entry lists, and one a chosen variant needs, still fail."""
    hub = LocalHub(env["hub"])
    make_variant(tmp_path / "act", "torch-cuda", module_id=uid("cuda"))  # CUDA builds only
    hub.publish(OTHER, tmp_path / "act", version=1)
    make_variant(tmp_path / "relu", "torch-cpu", module_id=uid("cpu"))
    cuda = make_variant(tmp_path / "relu", "torch-cuda", module_id=uid("cuda"))
    meta = json.loads((cuda / "metadata.json").read_text())
    meta["kernel-depends"] = [{"repo-id": OTHER, "version": 1}]
    (cuda / "metadata.json").write_text(json.dumps(meta))
    hub.publish(REPO, tmp_path / "relu", version=1)
    result = lock_project(project(tmp_path, f'[tool.kernels.dependencies]\n"{REPO}" = 1\n'),
                          hub=hub)
    assert result.hf_path is not None
    assert [e["dependency"]["repo-id"] for e in json.loads(result.hf_path.read_text())] == [
        OTHER, REPO]
    with caplog.at_level(logging.INFO, logger="kernelforge.lock"):
        got = download_locked(result.hf_path, hub=hub)
    assert [(r, v) for r, v, _ in got] == [(REPO, "torch-cpu")]
    [said] = [r for r in caplog.records if "is not fetched" in r.getMessage()]
    assert said.levelno == logging.INFO
    assert (f"{OTHER} version 1 is not fetched: no build variant of it fits this system, and "
            f"it is only a kernel-depends entry of {REPO} (variant torch-cuda), which a load "
            "here does not use" in said.getMessage())
    assert [v for _, v, _ in download_locked(result.hf_path, hub=hub, all_variants=True)] == [
        "torch-cuda", "torch-cpu", "torch-cuda"]  # every variant: OTHER's too
    # a kernel that no other entry lists has no variant here: as before, that fails
    alone = tmp_path / "alone.lock"
    alone.write_text(json.dumps([json.loads(result.hf_path.read_text())[0]]))
    with pytest.raises(VariantNotFoundError, match=f"no build variant of {OTHER}"):
        download_locked(alone, hub=hub)
    # nor is the dependency skipped when the variant a load here chooses needs it
    third = "kernels-test/third"
    vdir = make_variant(tmp_path / "third", "torch-cpu", module_id=uid("third"))
    meta = json.loads((vdir / "metadata.json").read_text())
    meta["kernel-depends"] = [{"repo-id": OTHER, "version": 1}]
    (vdir / "metadata.json").write_text(json.dumps(meta))
    hub.publish(third, tmp_path / "third", version=1)
    (tmp_path / "p3").mkdir()
    needs = lock_project(project(tmp_path / "p3",
                                 f'[tool.kernels.dependencies]\n"{third}" = 1\n'), hub=hub)
    assert needs.hf_path is not None
    with pytest.raises(VariantNotFoundError, match=f"no build variant of {OTHER}"):
        download_locked(needs.hf_path, hub=hub)


# --- malformed lock files name the file, the kernel and the field --------------------------


def _valid_entry() -> dict:
    return {"requested": {"version": 1}, "hub": "local", "repo": REPO, "branch": "v1",
            "commit": "1" * 40,
            "variants": {"torch-cpu": {"files": {"metadata.json": "x"}, "signer": None}}}


def _with(path: list, value: object) -> dict:
    doc = _valid_entry()
    node: dict = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return doc


@pytest.mark.parametrize(("kernels", "problem"), [
    ({"bad key": _valid_entry()},
     r"kernel 'bad key': the key must be a repository id 'org/name'"),
    ({REPO: _with(["repo"], "org/relu/extra")},
     rf"kernel {REPO!r}: 'repo' must be a repository id 'org/name', got 'org/relu/extra'"),
    ({REPO: _with(["repo"], 5)}, rf"kernel {REPO!r}: 'repo' must be a repository id"),
    ({REPO: _with(["variants", "torch-cpu", "files", "helper.py"], None)},
     rf"kernel {REPO!r}: variant 'torch-cpu': 'files': the digest of 'helper.py' must be a "
     "base64 sha256 string, got None"),
    ({REPO: _with(["variants", "torch-cpu", "files", "metadata.json"], {"a": 1})},
     r"'files': the digest of 'metadata.json' must be a base64 sha256 string"),
    ({REPO: _with(["variants", "torch-cpu", "signer"], 5)},
     r"variant 'torch-cpu': 'signer' must be a string or null, got 5"),
    ({REPO: _with(["branch"], 5)}, r"'branch' must be a string or null, got 5"),
    ({REPO: _with(["hub"], "lcoal")}, r"'hub' must be 'hf' or 'local', got 'lcoal'"),
    ({REPO: _with(["requested"], 5)}, r"'requested' must be an object.*got 5"),
    ({REPO: {**_valid_entry(), "depends": [{**_valid_entry(), "repo": "x",
                                            "requested": {"repo-id": OTHER, "version": 1}}]}},
     rf"depends\[0\] \({OTHER} version 1\): 'repo' must be a repository id"),
])
def test_a_malformed_lock_entry_names_file_kernel_and_field(
    tmp_path: Path, kernels: dict, problem: str
) -> None:
    lock = tmp_path / "kernelforge.lock"
    lock.write_text(json.dumps({"format": "kernelforge-lock/1", "kernels": kernels}))
    with pytest.raises(LockError, match=problem) as info:
        read_lock(lock)
    assert str(info.value).startswith(f"{lock}: kernel ")
    assert str(info.value).endswith("run 'kernelforge lock' again to rewrite the file")


@pytest.mark.parametrize(("dependency", "problem"), [
    ({"repo-id": "org relu", "version": 1},
     r"entry 0 \(kernel 'org relu'\): 'dependency.repo-id' must be a repository id 'org/name'"),
    ({"repo-id": REPO}, r"'dependency': needs exactly one of 'version' or 'revision'"),
    ({"repo-id": REPO, "version": 1, "revision": "v1"}, r"'dependency': needs exactly one"),
])
def test_a_malformed_kernels_lock_entry_names_file_kernel_and_field(
    tmp_path: Path, dependency: dict, problem: str
) -> None:
    lock = tmp_path / "kernels.lock"
    lock.write_text(json.dumps([{"dependency": dependency, "lock": {"commit": "1" * 40}}]))
    with pytest.raises(LockError, match=problem) as info:
        read_lock(lock)
    assert str(info.value).startswith(f"{lock}: entry 0 ")
    assert "run 'kernelforge lock' (or 'kernels lock') again" in str(info.value)


def test_a_kernels_lock_entry_with_a_version_range_is_kept_by_name(tmp_path: Path) -> None:
    lock = tmp_path / "kernels.lock"
    lock.write_text(json.dumps([{"dependency": {"repo-id": REPO, "version": ">=1"},
                                 "lock": {"commit": "1" * 40}}]))
    assert read_lock(lock).require(REPO).commit == "1" * 40


def test_the_cli_reports_a_malformed_lock_file_without_a_traceback(
    tmp_path: Path, capsys
) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "kernelforge.lock").write_text(json.dumps(
        {"format": "kernelforge-lock/1", "kernels": {REPO: _with(["repo"], "org/relu/extra")}}))
    hfbad = tmp_path / "hfbad"
    hfbad.mkdir()
    (hfbad / "kernels.lock").write_text(json.dumps(
        [{"dependency": {"repo-id": "org relu", "version": 1}, "lock": {"commit": "1" * 40}}]))
    for argv, file in [(["download", str(bad)], bad / "kernelforge.lock"),
                       (["download", str(hfbad)], hfbad / "kernels.lock"),
                       (["info", REPO, "--lock", str(bad / "kernelforge.lock")],
                        bad / "kernelforge.lock")]:
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"error: {file}: ") and "Traceback" not in err
        assert "run 'kernelforge lock'" in err


# --- writing the lock files ------------------------------------------------------------------


def _locked_project(tmp_path: Path, env) -> tuple[LocalHub, Path]:
    """A local hub holding REPO, and a project listing it in Hugging Face's table (so both
    lock files are written)."""
    hub = LocalHub(env["hub"])
    publish(hub, REPO, tmp_path / "v1")
    return hub, project(tmp_path, f'[tool.kernels.dependencies]\n"{REPO}" = 1\n')


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.endswith(".tmp"))


def test_a_lock_file_that_cannot_be_written_changes_nothing(
    tmp_path: Path, env, capsys, monkeypatch
) -> None:
    hub, root = _locked_project(tmp_path, env)
    (root / "kernelforge.lock").write_text("old\n")
    (root / "kernels.lock").mkdir()  # in the way of the second file
    with pytest.raises(LockError, match=rf"^{root / 'kernels.lock'}: cannot write the lock file "
                                        r"\(a directory is in the way\); nothing was changed$"):
        lock_project(root, hub=hub)
    assert (root / "kernelforge.lock").read_text() == "old\n"
    assert _leftovers(root) == []
    assert main(["lock", str(root), "--hub", str(env["hub"])]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {root / 'kernels.lock'}: cannot write")
    monkeypatch.chdir(root)  # the default project, '.': a relative path is no link
    assert main(["lock", "--hub", str(env["hub"])]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: kernels.lock: cannot write") and "a link" not in err
    assert "Traceback" not in err
    assert (root / "kernelforge.lock").read_text() == "old\n"


def test_a_failed_rename_puts_the_first_lock_file_back(
    tmp_path: Path, env, monkeypatch
) -> None:
    import errno
    import os

    hub, root = _locked_project(tmp_path, env)
    (root / "kernelforge.lock").write_text("old\n")
    (root / "kernelforge.lock").chmod(0o640)
    replace = os.replace
    calls: list[str] = []

    def failing(src, dst, **kw):
        calls.append(Path(dst).name)
        if Path(dst).name == "kernels.lock":
            raise OSError(errno.ENOSPC, "No space left on device")
        return replace(src, dst, **kw)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(LockError, match=rf"^{root / 'kernels.lock'}: cannot write the lock file "
                                        r"\(No space left on device\); nothing was changed$"):
        lock_project(root, hub=hub)
    assert calls == ["kernelforge.lock", "kernels.lock", "kernelforge.lock"]  # renamed back
    assert (root / "kernelforge.lock").read_text() == "old\n"
    assert (root / "kernelforge.lock").stat().st_mode & 0o777 == 0o640
    assert _leftovers(root) == []

    # when putting it back fails too, the message says which file was updated
    def broken(src, dst, **kw):
        calls.append(Path(dst).name)
        if Path(dst).name == "kernels.lock":
            raise OSError(errno.ENOSPC, "No space left on device")
        if calls[-2:] == ["kernels.lock", "kernelforge.lock"]:  # the rename putting it back
            raise OSError(errno.EIO, "Input/output error")
        return replace(src, dst, **kw)

    calls.clear()
    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(LockError, match=rf"{root / 'kernelforge.lock'} was updated and could "
                                        r"not be put back \(Input/output error\), so it "
                                        rf"disagrees with {root / 'kernels.lock'}: run "
                                        "'kernelforge lock' again"):
        lock_project(root, hub=hub)
    assert json.loads((root / "kernelforge.lock").read_text())["format"] == "kernelforge-lock/1"
    assert _leftovers(root) == []


def test_a_lock_file_keeps_its_mode_and_its_link(tmp_path: Path, env) -> None:
    import os

    hub, root = _locked_project(tmp_path, env)
    old_umask = os.umask(0o022)
    try:
        lock_project(root, hub=hub)
        assert (root / "kernelforge.lock").stat().st_mode & 0o777 == 0o644  # a new file
        (root / "kernelforge.lock").chmod(0o664)
        lock_project(root, hub=hub)
        assert (root / "kernelforge.lock").stat().st_mode & 0o777 == 0o664
    finally:
        os.umask(old_umask)
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "kernels.lock").write_text("[]\n")
    (root / "kernels.lock").unlink()
    (root / "kernels.lock").symlink_to(shared / "kernels.lock")
    result = lock_project(root, hub=hub)
    assert (root / "kernels.lock").is_symlink()
    assert [e["dependency"]["repo-id"]
            for e in json.loads((shared / "kernels.lock").read_text())] == [REPO]
    assert read_lock(result.hf_path).require(REPO).commit == read_lock(result.path).require(
        REPO).commit
    assert _leftovers(root) == [] and _leftovers(shared) == []


def test_an_interrupt_between_the_two_renames_puts_the_first_lock_file_back(
    tmp_path: Path, env, monkeypatch
) -> None:
    import os

    hub, root = _locked_project(tmp_path, env)
    (root / "kernelforge.lock").write_text("old\n")
    replace = os.replace

    def interrupted(src, dst, **kw):
        if Path(dst).name == "kernels.lock":
            raise KeyboardInterrupt
        return replace(src, dst, **kw)

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        lock_project(root, hub=hub)
    assert (root / "kernelforge.lock").read_text() == "old\n"
    assert _leftovers(root) == []


@pytest.mark.parametrize(("entry", "problem"), [
    ([1], "is not an object"),
    ({"lock": {"commit": "a" * 40}}, "has no 'dependency' object"),
    ({"dependency": {"version": 1}, "lock": {"commit": "a" * 40}},
     "has no 'dependency.repo-id' string"),
    ({"dependency": {"repo-id": "org/a", "version": 1}}, "has no 'lock' object"),
    ({"dependency": {"repo-id": "org/a", "version": 1}, "lock": {"commit": 123}},
     "'lock.commit' must be a 40-hex commit id, got 123"),
], ids=["not-an-object", "no-dependency", "no-repo-id", "no-lock", "bad-commit"])
def test_a_malformed_kernels_lock_entry_is_named_with_its_field(tmp_path: Path, entry,
                                                               problem) -> None:
    path = tmp_path / "kernels.lock"
    path.write_text(json.dumps([entry]))
    with pytest.raises(LockError) as info:
        read_lock(path)
    assert str(info.value).startswith(f"{path}: entry 0 {problem} (each entry is ")


def test_requirement_mistakes_are_named_as_written(tmp_path: Path) -> None:
    root = project(tmp_path, '[tool.kernelforge.dependencies]\n"org/a" = { revison = "v1" }\n')
    with pytest.raises(LockError, match=r"got \['revison'\]; 'revison' \(did you mean "
                                        r"'revision'\?\)"):
        read_requirements(root)
    root = project(tmp_path, '[tool.kernelforge.dependencies]\n"org/a" = true\n')
    with pytest.raises(LockError, match=r": true is not a version requirement"):
        read_requirements(root)


def test_a_missing_relative_lock_file_is_named_with_where_it_was_looked_for(
        tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LockError, match=rf"^kernelforge\.lock: lock file not found \(looked "
                                        rf"for {tmp_path / 'kernelforge.lock'}\)"):
        read_lock("kernelforge.lock")


def test_every_malformed_requirement_is_reported_together(tmp_path: Path) -> None:
    root = project(tmp_path, '[tool.kernelforge.dependencies]\n"bad id" = 1\n'
                             '"org/a" = "abc"\n"org/b" = 1\n')
    with pytest.raises(LockError) as info:
        read_requirements(root)
    message = str(info.value)
    assert message.startswith(f"{root / 'pyproject.toml'}: 2 problems:\n  - key ")
    assert "'bad id'" in message and "'abc' is not a version requirement" in message


def test_locking_an_older_version_says_nothing_of_loading_it(
        hf: HfHub, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Locking loads nothing: the loads' "loading version N as requested" line would
    mislead."""
    publish(hf, REPO, tmp_path / "v1")
    publish(hf, REPO, tmp_path / "v2", version=2)
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    with caplog.at_level(logging.WARNING, logger="kernelforge"):
        lock_project(root, hub=hf, allow=[REPO])
    assert not [r for r in caplog.records if "loading" in r.getMessage()], caplog.text


# --- what lock and download errors advise ------------------------------------------------


def test_lock_of_a_mistyped_name_says_the_local_hub_lacks_it(tmp_path: Path, env,
                                                             monkeypatch, capsys) -> None:
    """As for get_kernel: a name the default local hub lacks, asked of the Hugging Face
    Hub, is said to be missing from the local hub (with the names close to it), so that
    it does not read as a network problem; offline, lock is not sent to a lock file."""
    import huggingface_hub

    from kernelforge.hub import local as local_hub

    root = tmp_path / "default-hub"
    monkeypatch.delenv("KERNELFORGE_HUB")
    monkeypatch.setattr(local_hub, "default_root", lambda: root)
    publish(LocalHub(root), REPO, tmp_path / "v1")
    api = FakeHfApi(tmp_path / "remote")
    api.go_down()
    monkeypatch.setattr(huggingface_hub, "HfApi", lambda **_: api)
    root_project = project(tmp_path, '[tool.kernelforge.dependencies]\n"kernels-test/relx" = 1\n')
    hint = (f"repository 'kernels-test/relx' is not in the local hub {root} (it holds: {REPO}; "
            f"did you mean '{REPO}'?), so the Hugging Face Hub was asked: ")
    assert main(["lock", str(root_project)]) == 1
    err = capsys.readouterr().err
    assert hint in err and "check the network" in err, err
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError) as info:
        lock_project(root_project)
    said = str(info.value)
    assert said.startswith(hint), said
    assert "run 'kernelforge lock' while online" in said, said
    assert "pin it in a lock file" not in said and "load_kernel" not in said, said
    assert not (root_project / "kernelforge.lock").exists()


def test_download_with_the_network_down_does_not_advise_the_download_cache(
    hf: HfHub, api: FakeHfApi, tmp_path: Path
) -> None:
    """download fills the download cache: HF_HUB_OFFLINE=1 cannot help it. Its advice
    is to check the network and run it again; the variants it finished stay cached."""
    publish(hf, REPO, tmp_path / "v1", module_id=uid("down"))
    publish(hf, OTHER, tmp_path / "o1", module_id=uid("down"))
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n"{OTHER}" = 1\n')
    lock = lock_project(root, hub=hf, allow=True).path
    fresh = HfHub(api=api, cache=tmp_path / "fresh-cache")
    locked = read_lock(lock).require(REPO)
    fresh.fetch_variant(REPO, locked.commit, "torch-cpu")  # one of the two cached already
    api.go_down()
    with pytest.raises(HubError) as info:
        download_locked(lock, hub=fresh)
    said = str(info.value)
    assert "check the network and run the download again" in said, said
    assert "HF_HUB_OFFLINE" not in said, said
    assert fresh.cache.entry(REPO, locked.commit, "torch-cpu") is not None  # kept
    with pytest.raises(HubError) as info:  # a load's error still points to the cache
        loader.get_kernel(OTHER, version=1, hub=fresh, trust_remote_code=True)
    assert "set HF_HUB_OFFLINE=1 to use the download cache" in str(info.value)


def test_a_locked_load_from_a_missing_kernelforge_hub_names_the_variable(
    tmp_path: Path, env, monkeypatch
) -> None:
    hub = LocalHub(env["hub"])
    publish(hub, REPO, tmp_path / "v1")
    lock = lock_project(project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n'))
    typo = tmp_path / "typo-hub"
    monkeypatch.setenv("KERNELFORGE_HUB", str(typo))
    with pytest.raises(HubError, match=re.escape(
            f"(chosen by KERNELFORGE_HUB={typo}, which does not exist)")):
        loader.get_locked_kernel(REPO, lockfile=lock.path)


def test_a_local_hub_lock_under_kernelforge_hub_hf_does_not_say_the_variable_chose_it(
    tmp_path: Path, env, monkeypatch
) -> None:
    """KERNELFORGE_HUB=hf names no local hub: an entry locked from one is looked for in the
    user cache's, and the error says so, not that the variable chose a missing hub."""
    hub = LocalHub(env["hub"])
    publish(hub, REPO, tmp_path / "v1")
    lock = lock_project(project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n'))
    monkeypatch.setenv("KERNELFORGE_HUB", "hf")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with pytest.raises(HubError) as info:
        loader.get_locked_kernel(REPO, lockfile=lock.path)
    said = str(info.value)
    assert "chosen by KERNELFORGE_HUB" not in said, said
    assert ("(the local hub in the user cache: KERNELFORGE_HUB=hf names the Hugging Face Hub, "
            "and this lock entry records a local hub)") in said
    assert "name it: hub=DIR in Python, --hub DIR on the command line" in said


def test_the_projects_pyproject_toml_names_its_lock_and_a_lock_file_is_no_project(
    tmp_path: Path, env, capsys
) -> None:
    """'kernelforge lock' takes a project's pyproject.toml for the project: so do download
    and the locked loads, rather than reading it as a JSON lock file; and lock given a
    file that is not a pyproject.toml (the lock file) says so, not 'Not a directory'."""
    hub = LocalHub(env["hub"])
    commit, module_id = publish(hub, REPO, tmp_path / "v1")
    root = project(tmp_path, f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    pyproject = root / "pyproject.toml"
    with pytest.raises(LockError, match=re.escape(
            f"{root}: neither kernelforge.lock nor kernels.lock found")):
        read_lock(pyproject)
    assert lock_project(pyproject).path == root / "kernelforge.lock"
    assert read_lock(pyproject).path == root / "kernelforge.lock"
    assert [r for r, _v, _p in download_locked(pyproject)] == [REPO]
    assert loader.get_locked_kernel(REPO, lockfile=pyproject).__name__ == module_id
    assert loader.load_kernel(REPO, lockfile=pyproject).__name__ == module_id
    assert loader.kernel_info(REPO, lockfile=pyproject).commit == commit
    capsys.readouterr()
    assert main(["download", str(pyproject)]) == 0
    assert f"{REPO} torch-cpu: verified" in capsys.readouterr().out
    assert main(["lock", str(root / "kernelforge.lock")]) == 1
    err = capsys.readouterr().err
    assert (f"{root / 'kernelforge.lock'}: a file, not a project; 'kernelforge lock' takes "
            "the project directory (or its pyproject.toml)") in err, err
    with pytest.raises(LockError, match="a file, not a project"):
        lock_project(root / "kernelforge.lock")


def _lock_doc(fmt: str = "kernelforge-lock/1", **extra: object) -> dict:
    entry = {"hub": "local", "repo": REPO, "branch": "v1", "commit": "a" * 40,
             "variants": {"torch-cpu": {"files": {"metadata.json": "x"}, "signer": None}}}
    return {"format": fmt, "kernels": {REPO: {**entry, **extra}}}


def test_a_lock_of_a_newer_format_names_the_upgrade(tmp_path: Path) -> None:
    """A lock written by a newer kernelforge is not "not a lock file": the error says
    which version wrote it and what to do."""
    path = tmp_path / "kernelforge.lock"
    path.write_text(json.dumps(_lock_doc("kernelforge-lock/2")))
    with pytest.raises(LockError, match=re.escape(
            f"{path}: this lock file is of format 'kernelforge-lock/2', written by a newer "
            "kernelforge (this version reads 'kernelforge-lock/1'); upgrade kernelforge "
            "(update the checkout it was installed from, then run pip install -e . there "
            "again), or run 'kernelforge lock' with this version")):
        read_lock(path)
    for other in ("kernelforge-lock/0", "kernelforge-lock/x", "kernelforge-lock/²", "other/2",
                  "kernelforge-lock/" + "9" * 5000):
        path.write_text(json.dumps(_lock_doc(other)))
        with pytest.raises(LockError, match="not a lock file"):
            read_lock(path)


def test_fields_a_newer_version_adds_to_a_lock_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "kernelforge.lock"
    doc = _lock_doc(**{"added-later": {"x": 1}})
    doc["generator"] = "kernelforge 9"
    doc["kernels"][REPO]["variants"]["torch-cpu"]["size"] = 5
    path.write_text(json.dumps(doc))
    entry = read_lock(path).require(REPO)
    assert (entry.commit, list(entry.variants)) == ("a" * 40, ["torch-cpu"])
